"""SkillBank: parsing, writing, history, safety. The user's files must never be lost."""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

import pytest
from skills_ref.validator import validate as spec_validate

from engine.bank import skillfile
from engine.bank.skill import Skill
from engine.bank.store import SkillBank
from engine.bank.transfer import export_skills, import_skills
from engine.errors import ConflictError, ReadOnlyError, SkillFormatError, UnsafePathError
from engine.fsutil import slugify

NASTY = [
    ("Weekly report: format", "Use: colons, # hashes, 'quotes' and \"double\" quotes."),
    ("周报 格式 生成", "以后每次写周报都用三段式：进展、风险、下周计划。"),
    ("- starts with dash", "yes"),
    ("null", "true"),
    ("Café à la carte", "multi\nline\ndescription"),
    ("x" * 200, "d" * 3000),
    ("!!!", "only punctuation in the name"),
]


def make(title: str, description: str = "desc", **kw) -> Skill:
    return Skill(name=title, title=title, description=description,
                 instructions=kw.pop("instructions", "# Goal\nDo the thing.\n\n"
                                     "# Constraints & Style\n- Be brief.\n"), **kw)


def test_every_corpus_file_loads_or_is_reported(corpus, tmp_path):
    bank = SkillBank(tmp_path / "bank")
    shutil.copytree(corpus / "ConvSkill", bank.common_dir)
    total = sum(1 for _ in bank.common_dir.rglob("SKILL.md"))
    result = bank.load(user=None)
    assert len(result.skills) + len(result.errors) == total
    assert len(result.skills) >= total - 5
    for e in result.errors:
        assert e.reason and e.path.endswith("SKILL.md")
    zh = [s for s in result.skills if any("\u4e00" <= c <= "\u9fff" for c in s.title)]
    assert len(zh) > 300 and all(s.instructions for s in zh[:50])


@pytest.mark.parametrize("title,description", NASTY)
def test_skills_we_write_pass_the_reference_validator(bank_dir, title, description):
    bank = SkillBank(bank_dir)
    s = bank.create(make(title, description, triggers=["when: asked", "- dash"], tags=[],
                         examples=[{"input": "a: b", "output": "c"}]))
    assert spec_validate(s.path.parent) == []
    assert bank.validate(s.path) == []
    back = bank.read(s.path)
    assert back.title == title and back.triggers == ["when: asked", "- dash"]
    assert back.examples == [{"input": "a: b", "output": "c"}]
    assert len(s.name) <= 64 and s.name == slugify(s.name)


def test_slugs_are_unique_stable_and_keep_cjk(bank_dir):
    bank = SkillBank(bank_dir)
    a = bank.create(make("周报 格式"))
    b = bank.create(make("周报 格式"))
    assert a.name == "周报-格式" and b.name == "周报-格式-2"
    assert slugify("周报 格式") == slugify("周报 格式")
    assert slugify("!!!") != slugify("???")
    assert a.title == b.title == "周报 格式"


def test_autoskill_bank_round_trips_without_losing_fields(corpus, bank_dir):
    bank = SkillBank(bank_dir)
    src = [p for p in sorted((corpus / "ConvSkill").rglob("SKILL.md"))][:60]
    for p in src:
        try:
            orig = skillfile.read(p)
        except SkillFormatError:
            continue
        assert orig.layout == "autoskill"
        new = bank.create(orig)
        again = bank.read(new.path)
        for f in ("id", "title", "description", "version", "tags", "triggers", "examples",
                  "instructions"):
            assert getattr(again, f) == getattr(orig, f), (p, f)
        assert spec_validate(new.path.parent) == []


@pytest.mark.parametrize("bad", ["../evil", "/etc", "a\x00b", "..", ".hidden", "con", "a/b",
                                 "COM1.txt", ""])
def test_user_ids_cannot_escape_the_bank(bank_dir, bad):
    with pytest.raises(UnsafePathError):
        SkillBank(bank_dir).user_dir(bad)


def test_symlink_out_of_the_bank_is_rejected(bank_dir, tmp_path):
    bank = SkillBank(bank_dir)
    outside = tmp_path / "outside"
    (outside / "s").mkdir(parents=True)
    (outside / "s" / "SKILL.md").write_text("---\nname: s\ndescription: d\n---\nbody\n")
    bank.users_dir.mkdir()
    os.symlink(outside, bank.users_dir / "mallory")
    with pytest.raises(UnsafePathError):
        bank.user_dir("mallory")
    with pytest.raises(UnsafePathError):
        bank.read(bank.users_dir / "mallory" / "s" / "SKILL.md")
    # a symlinked skill folder inside a real user folder is skipped, not followed
    real = bank.user_dir("bob", create=True)
    os.symlink(outside / "s", real / "s")
    assert bank.load("bob").skills == []


def test_load_reports_each_bad_file_and_keeps_going(bank_dir):
    bank = SkillBank(bank_dir)
    good = bank.create(make("good one"))
    udir = good.path.parent.parent
    cases = {
        "yaml": b"---\nname: [unclosed\ndescription: x\n---\nbody\n",
        "utf8": b"---\nname: x\ndescription: \xff\xfe\n---\n",
        "nofm": b"# Just markdown\n",
        "binary": b"\x00" * 5000,
        "large": b"---\nname: big\ndescription: d\n---\n" + b"x" * (2 * 1024 * 1024),
    }
    for name, data in cases.items():
        (udir / name).mkdir()
        (udir / name / "SKILL.md").write_bytes(data)
    result = bank.load()
    assert [s.title for s in result.skills] == ["good one"]
    reasons = {Path(e.path).parent.name: e.reason for e in result.errors}
    assert "malformed YAML" in reasons["yaml"] and "line" in reasons["yaml"]
    assert "not UTF-8" in reasons["utf8"]
    assert "missing front-matter" in reasons["nofm"]
    assert "binary" in reasons["binary"]
    assert "too large" in reasons["large"]


def test_hand_edit_race_refuses_the_stale_write_and_keeps_the_edit(bank_dir):
    bank = SkillBank(bank_dir)
    s = bank.create(make("tone"))
    stale = bank.read(s.path)  # a background merge read this...
    edited = s.path.read_text().replace("Be brief.", "Be brief. Never use emoji.")
    tmp = s.path.with_name(".SKILL.md.swp")  # ...then the user's editor saved atomically
    tmp.write_text(edited)
    os.replace(tmp, s.path)
    with pytest.raises(ConflictError):
        bank.write(stale.copy(instructions="# Goal\nmerged\n"), expected_hash=stale.content_hash)
    assert "Never use emoji" in s.path.read_text()
    fresh = bank.read(s.path)  # the merge starts again from the file on disk
    merged = bank.write(fresh.copy(instructions=fresh.instructions + "\n- Use a table.\n"),
                        expected_hash=fresh.content_hash)
    text = merged.path.read_text()
    # the hand edit (unwatched here) became 0.1.1 in the history; the merge is 0.1.2 on top
    assert "Never use emoji" in text and "Use a table" in text and merged.version == "0.1.2"
    assert "Use a table" not in bank.history.text(s.id, "0.1.1")
    assert "Never use emoji" in bank.history.text(s.id, "0.1.1")


def test_versions_history_diff_and_revert_survive_a_restart(bank_dir):
    bank = SkillBank(bank_dir)
    s = bank.create(make("report"))
    s2 = bank.write(s.copy(instructions="# Goal\nv2\n"), expected_hash=s.content_hash)
    # hand edit without touching the version: recorded as a new version by the user
    s2.path.write_text(s2.path.read_text().replace("v2", "v2 by hand"))
    edit = bank.record_hand_edit(s2.path)
    assert edit.version == "0.1.2" and edit.source == "user-edit"
    assert bank.record_hand_edit(s2.path) is None  # nothing new
    bank = SkillBank(bank_dir)  # restart
    versions = bank.history.versions(s.id)
    assert [(v.version, v.source) for v in versions] == [
        ("0.1.0", "extracted"), ("0.1.1", "merged"), ("0.1.2", "user-edit")]
    assert "-v2\n" in bank.history.diff(s.id, "0.1.1", "0.1.2").replace("v2 by hand", "")
    reverted = bank.revert(bank.read(s.path), "0.1.0")
    assert reverted.version == "0.1.3" and reverted.source == "revert"
    assert reverted.instructions == s.instructions
    assert bank.history.latest(s.id).version == "0.1.3"


def test_delete_moves_to_trash_and_restore_brings_it_back(bank_dir):
    bank = SkillBank(bank_dir)
    s = bank.create(make("keep me"))
    where = bank.delete(s)
    assert where.is_dir() and (where / "SKILL.md").is_file() and not s.path.exists()
    assert bank.load().skills == []
    back = bank.restore(where)
    assert back.title == "keep me" and back.path.is_file()


def test_common_skills_are_read_only(bank_dir):
    bank = SkillBank(bank_dir)
    d = bank.common_dir / "lib" / "shared-skill"
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text("---\nname: shared-skill\ndescription: d\n---\nbody\n")
    s = bank.load(None).skills[0]
    assert s.scope == "common" and s.owner == "lib"
    with pytest.raises(ReadOnlyError):
        bank.write(s, expected_hash=s.content_hash)
    with pytest.raises(ReadOnlyError):
        bank.delete(s)


def test_import_export_folder_and_zip_with_resources(corpus, bank_dir, tmp_path):
    bank = SkillBank(bank_dir)
    src = tmp_path / "src" / "my-tool"
    (src / "scripts").mkdir(parents=True)
    (src / "SKILL.md").write_text("---\nname: my-tool\ndescription: Use my tool.\n---\n# Goal\nx\n")
    (src / "scripts" / "run.sh").write_text("echo hi\n")
    shutil.copytree(next((corpus / "ConvSkill").rglob("SKILL.md")).parent, tmp_path / "src" / "a")
    rep = import_skills(bank, tmp_path / "src")
    assert len(rep.imported) == 2 and rep.skipped == []
    tool = next(s for s in rep.imported if s.name == "my-tool")
    assert tool.resources == ["scripts/run.sh"]
    out = export_skills(rep.imported, tmp_path / "out.zip")
    names = zipfile.ZipFile(out).namelist()
    assert "my-tool/scripts/run.sh" in names
    rep2 = import_skills(SkillBank(tmp_path / "bank2"), out)
    assert sorted(s.title for s in rep2.imported) == sorted(s.title for s in rep.imported)
    for s in rep2.imported:
        assert spec_validate(s.path.parent) == []


def test_zip_slip_is_rejected(bank_dir, tmp_path):
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("../../escaped/SKILL.md", "---\nname: x\ndescription: y\n---\n")
    with pytest.raises(UnsafePathError):
        import_skills(SkillBank(bank_dir), evil)
    assert not (tmp_path / "escaped").exists()


def test_disk_full_leaves_the_old_file_intact(bank_dir, monkeypatch):
    bank = SkillBank(bank_dir)
    s = bank.create(make("precious"))
    before = s.path.read_bytes()
    import engine.fsutil as fsutil

    real_fdopen = os.fdopen

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.fh.close()

        def write(self, data):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(fsutil.os, "fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    with pytest.raises(OSError):
        bank.write(s.copy(instructions="# Goal\nnew\n"), expected_hash=s.content_hash)
    monkeypatch.undo()
    assert s.path.read_bytes() == before
    assert [p.name for p in s.path.parent.iterdir()] == ["SKILL.md"]


def test_shipped_starter_skills_are_valid(tmp_path):
    from engine.bank.starter import seed_starter

    res = SkillBank(tmp_path, create=True)
    seed_starter(tmp_path, "default")
    res = res.load(None, "common")
    assert len(res.skills) >= 4 and res.errors == []
    for s in res.skills:
        assert spec_validate(s.path.parent) == [], s.path


def test_a_hand_edit_nobody_watched_is_kept_before_our_next_write(tmp_path):
    """The app was closed while the user edited the file: SkillDesk's next write (a merge, a
    revert) first keeps the edit as a version of its own, so undo can return to it."""
    bank = SkillBank(tmp_path / "bank")
    s = bank.create(Skill(name="x", title="Report", description="Weekly reports.",
                          instructions="# Goal\nShip it.\n\n# Constraints & Style\n- One page\n"))
    edited = s.path.read_text("utf-8").replace("- One page", "- One page\n- Mine, by hand")
    s.path.write_text(edited, "utf-8")  # no watcher, no record_hand_edit
    current = bank.read(s.path)
    merged = bank.write(current.copy(instructions=current.instructions + "\n- Learned rule"),
                        expected_hash=current.content_hash)
    texts = [bank.history.text(s.id, v.version) for v in bank.history.versions(s.id)]
    assert any("Mine, by hand" in t and "Learned rule" not in t for t in texts)
    assert bank.effective_version(current) != s.version  # the edit has a version of its own
    assert "Learned rule" in merged.path.read_text("utf-8")


def test_export_never_leaves_the_destination_nor_overwrites(tmp_path):
    from engine.bank.transfer import export_skills

    bank = SkillBank(tmp_path / "bank")
    s = bank.create(make("report"))
    text = s.path.read_text("utf-8").replace("name: report", "name: ../escaped")
    s.path.write_text(text, "utf-8")  # a hand edit of the name
    dest = tmp_path / "out"
    (dest / "escaped").mkdir(parents=True)
    (dest / "escaped" / "SKILL.md").write_text("mine", "utf-8")
    export_skills([bank.read(s.path)], dest)
    assert not (tmp_path / "escaped").exists()  # nothing outside the destination
    assert (dest / "escaped" / "SKILL.md").read_text("utf-8") == "mine"  # not overwritten
    assert (dest / "escaped-2" / "SKILL.md").is_file()
