"""Reading old conversations and documents: liberal input, explicit skips, stable keys."""

from __future__ import annotations

from pathlib import Path

from engine.imports.readers import Ledger, read_conversations, read_documents, split_sections

DATA = Path(__file__).parents[2] / "data" / "imports"


def test_mixed_conversation_folder():
    items, skipped = read_conversations(DATA)
    firsts = sorted(i.messages[0]["content"][:20] for i in items)
    assert firsts == sorted(["From now on, always ", "以后写周报都用三段式：进展、风险、下周计划。"[:20],
                             "Never use emoji in c", "Write commit message",
                             "Use metric units, al"])
    chatgpt = next(i for i in items if i.title == "Commit style")
    assert [m["role"] for m in chatgpt.messages] == ["user", "assistant"]
    reasons = {Path(s.source.split(":")[0].split(" ")[0]).name: s.reason for s in skipped}
    assert reasons["broken.json"] == "not UTF-8 text"
    assert any("invalid JSON" in s.reason and s.source.endswith(":2") for s in skipped)
    assert any(s.reason == "no user messages" for s in skipped)
    assert len({i.key for i in items}) == len(items)
    again, _ = read_conversations(DATA)
    assert [i.key for i in again] == [i.key for i in items]  # stable across runs


def test_sections_follow_headings_and_ignore_code_fences():
    doc = ("# Style guide\n\nIntro text that is long enough to be a section on its own.\n\n"
           "## Commits\n\nUse the imperative mood. Keep the subject under 50 characters.\n\n"
           "```\n# not a heading inside code\n```\n\n## Reviews\n\nshort\n")
    secs = split_sections(doc)
    assert [h for h, _ in secs] == ["Style guide", "Style guide / Commits"]
    assert "# not a heading" in secs[1][1]


def test_documents_and_ledger(tmp_path):
    (tmp_path / "guide.md").write_text("# Rules\n\nAlways answer in British English, "
                                       "and cite the source of every number.\n")
    (tmp_path / "bin.txt").write_bytes(b"\x00\x01\x02")
    items, skipped = read_documents(tmp_path)
    assert [i.title for i in items] == ["Rules"]
    assert [s.reason for s in skipped] == ["binary file"]
    led = Ledger(tmp_path / "bank", "default")
    led.mark(items[0].key, {"outcome": "add"})
    assert items[0].key in Ledger(tmp_path / "bank", "default")
