"""The inputs of the reader fuzzing (bench/fuzz_targets.py): samples, strategies, a hostile bank.

Inputs, for every reader: arbitrary bytes; arbitrary JSON/YAML trees (deep, wide, wrong types,
huge strings); trees nested far past any recursion limit (up to 200,000 levels); real files
from ``shared/corpora`` (copied, then mutated: bytes flipped, cut short, YAML/JSON punctuation
spliced in; without the corpus the mutations start from built-in samples); damaged zips and
chat databases; and ``build_hostile_bank``: 34 hostile SKILL.md files plus good ones, for the
desktop test and the screenshot script.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import warnings
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

CORPORA = Path(os.environ.get("SKILLDESK_CORPORA", "/work/shared/corpora"))
if not CORPORA.is_dir():  # a checkout next to shared/
    CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"

GOOD_SKILL = (b"---\nname: tldr-first\ndescription: Start summaries with a TL;DR line.\n"
              b"metadata:\n  id: 1b0c\n  version: 0.1.2\n  tags:\n  - summaries\n  triggers:\n"
              b"  - summarize this\n---\n# Goal\nSummaries start with a one-line TL;DR.\n")
GOOD_CONVERSATION = json.dumps([{"role": "user", "content": "Always answer in French."},
                                {"role": "assistant", "content": "D'accord."}]).encode()
GOOD_TRAJECTORY = json.dumps({"task": "fix the test", "success": True, "steps": [
    {"action": "bash(pytest -x)", "observation": "1 failed"},
    {"action": "edit(app.py)", "observation": "ok"},
    {"action": "bash(pytest -x)", "observation": "1 passed"}]}).encode()


# ----------------------------------------------------------------------------- samples
def _sample_files(pattern: str, root: str, n: int) -> list[bytes]:
    base = CORPORA / root
    if not base.is_dir():
        return []
    out = []
    for p in sorted(base.rglob(pattern)):
        if len(out) >= n:
            break
        with contextlib.suppress(OSError):
            data = p.read_bytes()
            if len(data) <= 64 * 1024:
                out.append(data)
    return out


_CACHE: dict[str, list[bytes]] = {}


def skill_samples() -> list[bytes]:
    """A fixed spread of real SKILL.md files (both layouts) plus the built-in one."""
    if "skills" not in _CACHE:
        real = _sample_files("SKILL.md", "autoskill-dev", 4000)
        _CACHE["skills"] = [GOOD_SKILL, *real[::max(1, len(real) // 60)]]
    return _CACHE["skills"]


def session_samples() -> list[bytes]:
    """Real chat-session exports (a part of each; they are large) plus the built-in one."""
    if "sessions" not in _CACHE:
        real = [d[:20_000] for d in _sample_files("*.json", "autoskill-sessions-sample", 3)]
        full = []
        base = CORPORA / "autoskill-sessions-sample"
        if base.is_dir():  # one whole export, re-serialised small: a valid real structure
            with contextlib.suppress(OSError, ValueError):
                p = sorted(base.glob("*.json"))[0]
                data = json.loads(p.read_text("utf-8"))
                data["sessions"] = data.get("sessions", [])[:2]
                full.append(json.dumps(data, ensure_ascii=False).encode())
        _CACHE["sessions"] = [GOOD_CONVERSATION, GOOD_TRAJECTORY, *full, *real]
    return _CACHE["sessions"]


# ----------------------------------------------------------------------------- strategies
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
    st.sampled_from(["", "many", "0.1.0", "../../etc", "a\x00b", "\u202e", "user", "all",
                     "planning", "- x", "[", "{", "*a", "&a", "---", "\ufeff"]))

json_trees = st.recursive(
    _SCALARS,
    lambda kids: st.one_of(st.lists(kids, max_size=6),
                           st.dictionaries(st.text(max_size=12) | st.sampled_from(
                               ["name", "description", "metadata", "tags", "triggers", "role",
                                "content", "messages", "steps", "mapping", "parent", "children",
                                "author", "tool_calls", "function", "arguments", "top_k", "model",
                                "retrieval", "id", "kind", "clusters", "keeper", "trashed"]),
                               kids, max_size=6)),
    max_leaves=40)


@st.composite
def deep_values(draw: Any) -> Any:
    """A list/dict nested 30 to 200,000 levels deep (built iteratively)."""
    depth = draw(st.sampled_from([30, 33, 65, 500, 1200, 5000, 100_000, 200_000]))
    kind = draw(st.sampled_from(["list", "dict", "mixed"]))
    value: Any = draw(st.sampled_from([None, 1, "x", []]))
    for i in range(depth):
        as_list = kind == "list" or (kind == "mixed" and i % 2)
        value = [value] if as_list else {"messages": value}
    return value


def _deep_text(depth: int, kind: str) -> str:
    """The JSON/flow-YAML text of a value nested ``depth`` deep, without building it."""
    if kind == "list":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


deep_json_text = st.builds(_deep_text, st.sampled_from([33, 65, 999, 5000, 100_000, 200_000]),
                           st.sampled_from(["list", "dict"]))

huge_text = st.builds(lambda n, c: c * n, st.sampled_from([10_000, 300_000, 1_100_000]),
                      st.sampled_from(["a", " ", "\n", "[", "- ", "é", "\x00"]))

_SPLICES = [b"[", b"]", b"{", b"}", b":", b": ", b"- ", b"\n", b"\t", b"---\n", b"&a ", b"*a",
            b"!!python/object:os.system ", b"\x00", b"\xff", b"\xef\xbb\xbf", b'"', b"'", b"#",
            b"? ", b"|", b">", b"\r", b"%YAML 1.1\n", b"<<: *a\n", b"\\u0000", b"1e999",
            b"9" * 5000, b"null", b",", b"\xc3"]


@st.composite
def mutated(draw: Any, samples: Callable[[], list[bytes]]) -> bytes:
    """A real file with 1 to 8 mutations: flips, cuts, splices, duplicated slices."""
    data = bytearray(draw(st.sampled_from(samples())))
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["flip", "cut", "splice", "dup", "delete"]))
        at = draw(st.integers(0, max(0, len(data))))
        if op == "flip" and data:
            i = min(at, len(data) - 1)
            data[i] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[at:]
        elif op == "splice":
            data[at:at] = draw(st.sampled_from(_SPLICES)) * draw(st.integers(1, 3))
        elif op == "dup" and data:
            end = min(len(data), at + draw(st.integers(1, 200)))
            data[at:at] = data[at:end] * draw(st.integers(1, 50))
        elif op == "delete":
            del data[at:at + draw(st.integers(1, 50))]
    return bytes(data)


def _front_matter(fields: dict, style: str) -> bytes:
    try:
        text = yaml.safe_dump(fields, default_flow_style=(style == "flow"), allow_unicode=True,
                              width=10_000)
    except (yaml.YAMLError, ValueError, RecursionError):  # floats yaml cannot write, say
        text = json.dumps(fields, default=str)  # JSON is YAML
    return f"---\n{text}---\n# Goal\nDo the thing.\n".encode("utf-8", "surrogatepass")


@st.composite
def skill_files(draw: Any) -> bytes:
    """Any of: bytes, real or built files mutated, front matter of any shape, deep nesting."""
    kind = draw(st.sampled_from(["bytes", "mutated", "fields", "fields", "deep", "deep-block",
                                 "anchors", "huge"]))
    if kind == "bytes":
        return draw(st.binary(max_size=2000))
    if kind == "mutated":
        return draw(mutated(skill_samples))
    if kind == "fields":
        keys = st.sampled_from(["name", "description", "metadata", "tags", "triggers",
                                "version", "level", "examples", "allowed-tools", "license",
                                "compatibility", "id", "title", "created", "source_turns"])
        fields = draw(st.dictionaries(keys | st.text(max_size=8), json_trees, max_size=8))
        if draw(st.booleans()):
            fields.setdefault("name", "x")
        return _front_matter(fields, draw(st.sampled_from(["flow", "block"])))
    if kind == "deep":
        depth = draw(st.sampled_from([31, 32, 33, 500, 3000, 100_000]))
        field = draw(st.sampled_from(["name", "tags", "metadata", "examples", "x"]))
        return (f"---\nname: n\n{field}: " + "[" * depth + "]" * depth
                + "\n---\nbody\n").encode()
    if kind == "deep-block":
        depth = draw(st.sampled_from([33, 300, 2000]))
        lines = ["---", "name: n", "tags:"] + ["  " * (i + 1) + "-" for i in range(depth)]
        return ("\n".join(lines) + "\n---\nbody\n").encode()
    if kind == "anchors":
        return draw(st.sampled_from([
            b"---\nname: &a [*a]\n---\nb\n",
            b"---\nname: x\nmetadata: &m {k: *m}\n---\nb\n",
            b"---\na: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
            b"c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
            b"e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nname: x\nexamples: *e\n---\n",
            b"---\nname: !!python/object/apply:os.system ['true']\n---\n",
            b"---\n? [a, b]\n: c\nname: x\n---\n",
            b"---\nname: x\ncreated: 2024-01-01\nversion: 1.0\nlevel: 3\n---\nbody\n"]))
    return b"---\nname: n\ndescription: " + draw(huge_text).encode() + b"\n---\nbody\n"


@st.composite
def json_files(draw: Any) -> bytes:
    """Text for a .json/.jsonl import: trees, deep nesting, real exports mutated, bytes."""
    kind = draw(st.sampled_from(["tree", "tree", "deep", "deep-text", "mutated", "bytes",
                                 "lines"]))
    if kind == "tree":
        return json.dumps(draw(json_trees), ensure_ascii=draw(st.booleans())).encode(
            "utf-8", "surrogatepass")
    if kind == "deep":
        value = draw(deep_values())
        try:
            return json.dumps(value).encode()
        except RecursionError:  # too deep for the encoder: write the text directly
            return draw(deep_json_text).encode()
    if kind == "deep-text":
        return draw(deep_json_text).encode()
    if kind == "mutated":
        return draw(mutated(session_samples))
    if kind == "lines":
        parts = draw(st.lists(st.one_of(json_trees.map(json.dumps), deep_json_text,
                                        st.text(max_size=30)), max_size=6))
        text = "\n".join(parts)
        if draw(st.booleans()) and text:  # a cut-short last line
            text = text[: draw(st.integers(0, len(text)))]
        return text.encode("utf-8", "surrogatepass")
    return draw(st.binary(max_size=2000))


GOOD_RECORD = {
    "id": "r1", "user": "default", "created": "2026-01-01T00:00:00Z", "threshold": 0.9,
    "status": "applied", "skipped": [], "undone": "", "conflicts": [],
    "clusters": [{"similarity": 0.95, "notes": [],
                  "keeper": {"path": "Users/default/a/SKILL.md", "id": "a", "title": "A",
                             "before_version": "0.1.0", "after_version": "0.1.1",
                             "before_hash": "0" * 64, "after_hash": "1" * 64,
                             "backup": ".consolidations/r1/0000-a.md"},
                  "trashed": [{"path": "Users/default/b/SKILL.md", "id": "b", "title": "B",
                               "version": "0.1.0", "hash": "2" * 64,
                               "trash": ".trash/x-default-b"}]}]}
GOOD_EVENT = {"id": "e1", "kind": "add", "turn_id": "t", "job_id": "j", "skill_id": "s",
              "skill_name": "n", "title": "T", "path": "/p", "version": "0.1.0",
              "previous_version": None, "reason": "", "time": 1.0, "undone": False,
              "undoes": None}


@st.composite
def mutated_json(draw: Any, base: dict) -> bytes:
    """A valid document with 1 to 4 values replaced by arbitrary trees or keys removed."""
    doc = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, 4))):
        node, key = doc, None
        while True:  # walk down to a random place
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                key = None
                break
            key = draw(st.sampled_from(keys))
            if not isinstance(node[key], (dict, list)) or draw(st.booleans()):
                break
            node = node[key]
        if key is None:
            continue
        if isinstance(node, dict) and draw(st.integers(0, 4)) == 0:
            del node[key]
        else:
            node[key] = draw(json_trees)
    text = json.dumps(doc)
    if draw(st.integers(0, 5)) == 0:  # cut short
        text = text[: draw(st.integers(0, len(text)))]
    return text.encode()


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="skilldesk-fuzz-") as d:
        yield Path(d)


@st.composite
def zip_files(draw: Any) -> bytes:
    """A zip of skill folders (member names of any kind) or a mutated one."""
    buf = io.BytesIO()
    names = st.one_of(st.sampled_from(["a/SKILL.md", "b/skill.md", "SKILL.md", "../x/SKILL.md",
                                       "/abs/SKILL.md", "c/scripts/run.sh", "d/SKILL.md/",
                                       "e\\..\\..\\SKILL.md", "f/\x00/SKILL.md", "g/.hidden/SKILL.md",
                                       "h/references/r.md", "i/SKILL.md"]),
                      st.text(min_size=1, max_size=20).map(lambda t: f"{t}/SKILL.md"))
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate member names are part of the test
        for name in draw(st.lists(names, max_size=5)):
            content = draw(skill_files())
            # names zipfile itself cannot store (empty after its NUL cut) are left out
            with contextlib.suppress(ValueError, UnicodeError, IndexError):
                zf.writestr(name, content)
    data = buf.getvalue()
    if draw(st.booleans()):  # damage the archive itself
        arr = bytearray(data)
        for _ in range(draw(st.integers(1, 6))):
            if arr:
                arr[draw(st.integers(0, len(arr) - 1))] = draw(st.integers(0, 255))
        if draw(st.booleans()):
            del arr[draw(st.integers(0, len(arr))):]
        data = bytes(arr)
    return data


_DB_CACHE: dict[str, bytes] = {}


def _good_db() -> bytes:
    if "db" not in _DB_CACHE:
        from engine.chat.conversations import ConversationStore

        with scratch() as root:
            store = ConversationStore(root / "c.sqlite3")
            for i in range(5):
                c = store.new(f"chat {i}")
                for j in range(6):
                    store.add_message(c.id, "user" if j % 2 == 0 else "assistant",
                                      f"message {j} " * 30, meta={"n": j})
            store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            store.close()
            _DB_CACHE["db"] = (root / "c.sqlite3").read_bytes()
    return _DB_CACHE["db"]


@st.composite
def db_files(draw: Any) -> bytes:
    """A real chat database with damaged pages, cut short, or plain bytes."""
    kind = draw(st.sampled_from(["damaged", "damaged", "cut", "bytes", "header"]))
    data = bytearray(_good_db())
    if kind == "bytes":
        return draw(st.binary(max_size=5000))
    if kind == "cut":
        return bytes(data[: draw(st.integers(0, len(data)))])
    if kind == "header":  # the SQLite magic then garbage
        return bytes(data[:100]) + draw(st.binary(max_size=3000))
    for _ in range(draw(st.integers(1, 20))):
        at = draw(st.integers(0, len(data) - 1))
        data[at] = draw(st.integers(0, 255))
    return bytes(data)


# ----------------------------------------------------------------------------- a hostile bank
def hostile_files() -> dict[str, bytes]:
    """Over thirty SKILL.md files a hostile or careless sharer could send, by folder name."""
    head = b"---\nname: x\ndescription: d\n"
    block = ["---", "name: deep-block", "tags:"] + ["  " * (i + 1) + "-" for i in range(600)]
    bomb = (b"---\nname: bomb\na: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
            b"c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
            b"e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nexamples: *e\n---\nbody\n")
    return {
        "deep-flow-100k": b"---\nname: n\nexamples: " + b"[" * 100_000 + b"]" * 100_000
                          + b"\n---\nbody\n",
        "deep-flow-5000": b"---\nname: n\nmetadata:\n  tags: " + b"[" * 5000 + b"]" * 5000
                          + b"\n---\nbody\n",
        "deep-map-3000": b"---\nname: n\nmetadata: " + b"{a: " * 3000 + b"1" + b"}" * 3000
                         + b"\n---\nbody\n",
        "deep-block-600": ("\n".join(block) + "\n---\nbody\n").encode(),
        "recursive-alias": b"---\nname: r\nmetadata: &m {k: *m}\n---\nbody\n",
        "billion-laughs": bomb,
        "python-tag": b"---\nname: !!python/object/apply:os.system ['touch /tmp/pwned']\n---\nb\n",
        "binary": bytes(range(256)) * 40,
        "invalid-utf8": head + b"title: caf\xe9\n---\nbody\n",
        "mostly-nul": b"\x00" * 5000,
        "too-large": head + b"---\n" + b"x" * (1024 * 1024 + 10),
        "no-front-matter": b"# Just a heading\nSome text.\n",
        "unclosed": b"---\nname: x\ndescription: never closed\n",
        "empty": b"",
        "bom-only": b"\xef\xbb\xbf",
        "front-matter-list": b"---\n- a\n- b\n---\nbody\n",
        "front-matter-scalar": b"---\njust text\n---\nbody\n",
        "bad-indent": b"---\nname: x\n  description: y\n z: [\n---\nbody\n",
        "tab-indent": b"---\nname: x\nmetadata:\n\ttags: [a]\n---\nbody\n",
        "colon-in-value": b"---\nname: x\ndescription: Start with: a bottom line: now\n---\nb\n",
        "name-list": b"---\nname: [a, b]\ndescription: d\n---\nbody\n",
        "name-mapping": b"---\nname: {first: a}\n---\nbody\n",
        "name-too-long": b"---\nname: " + b"n" * 300 + b"\n---\nbody\n",
        "description-list": b"---\nname: x\ndescription: [a, b]\n---\nbody\n",
        "tags-mapping": b"---\nname: x\ntags: {a: 1}\n---\nbody\n",
        "triggers-nested": b"---\nname: x\ntriggers: [[a, b], c]\n---\nbody\n",
        "metadata-string": b"---\nname: x\nmetadata: hello\n---\nbody\n",
        "metadata-version-list": b"---\nname: x\nmetadata:\n  version: [1, 2]\n---\nbody\n",
        "allowed-tools-mapping": b"---\nname: x\nallowed-tools: {bash: yes}\n---\nbody\n",
        "license-list": b"---\nname: x\nlicense: [MIT]\n---\nbody\n",
        "unhashable-key": b"---\n? [a, b]\n: c\nname: x\n---\nbody\n",
        "wide-100k-values": b"---\nname: w\nexamples: [" + b"1," * 30_000 + b"1]\n---\nb\n",
        "huge-string-tag": b"---\nname: x\ntags: [" + b"t" * 900_000 + b"]\n---\nbody\n",
        "huge-description": b"---\nname: x\ndescription: " + b"d " * 100_000 + b"\n---\nb\n",
    }


GOOD_SKILLS = {
    "tldr-first": GOOD_SKILL,
    "french-replies": b"---\nname: french-replies\ndescription: Answer in French.\n---\n"
                      b"# Goal\nReply in French unless asked otherwise.\n",
    "sql-style": b"---\nname: sql-style\ndescription: Uppercase SQL keywords, one clause a line."
                 b"\nmetadata:\n  version: 1.2.0\n  level: atomic\n  tags:\n  - sql\n---\n"
                 b"# Goal\nFormat SQL.\n",
    "legacy-autoskill": b"---\nid: 5d2f\nname: Weekly report\ndescription: Weekly reports in "
                        b"three parts.\nversion: 0.1.3\ntags: [reporting]\ntriggers: [weekly "
                        b"report]\n---\n# Weekly report\n\n## Prompt\n\nUse Progress, Risks, "
                        b"Next week.\n",
    "numbers-and-dates": b"---\nname: dated\ndescription: 2024\nmetadata:\n  version: 1.0\n"
                         b"  created: 2024-01-01\n---\nbody\n",
}


def build_hostile_bank(bank: Path, *, real: int = 10) -> tuple[list[str], list[str]]:
    """A bank of every hostile file above plus good skills (``real`` of them from the corpus,
    when it is there). Returns ``(good folder names, hostile folder names)``."""
    users = bank / "Users" / "default"
    good = dict(GOOD_SKILLS)
    corpus = CORPORA / "autoskill-dev"
    if corpus.is_dir() and real:
        files = sorted(corpus.rglob("SKILL.md"))
        for f in files[:: max(1, len(files) // real)][:real]:
            good[f"real-{f.parent.name}"[:60]] = f.read_bytes()
    for name, data in [*good.items(), *hostile_files().items()]:
        d = users / name if name in good else bank / "Common" / "shared-zip" / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "SKILL.md").write_bytes(data)
    return sorted(good), sorted(hostile_files())
