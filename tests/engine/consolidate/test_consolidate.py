"""Consolidation: clustering, the dry-run plan, apply + one-step undo, junk flags (issue 9)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from engine.bank.skill import Skill
from engine.bank.store import SkillBank
from engine.consolidate import apply_plan, flag_bank, llm_merge, make_plan, undo, union_merge
from engine.consolidate.cluster import cluster, similar_pairs
from engine.consolidate.flags import load_report
from engine.errors import NotFoundError, StructuredOutputError
from engine.learning.candidate import Candidate, render_body


class BagEmbedder:
    """Hashed bag of words: equal texts -> cosine 1, unrelated texts -> about 0."""

    dim = 256
    signature = "bag-256"

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dim] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def _unit(*xs):
    v = np.asarray(xs, np.float32)
    return v / np.linalg.norm(v)


# ------------------------------------------------------------------------------ clustering
def test_cluster_near_duplicates_exact():
    e1, e2, e3, e4 = np.eye(4, dtype=np.float32)
    vecs = np.stack([e1, _unit(1, .1, 0, 0), _unit(1, 0, .1, 0), e2, e4, np.zeros(4)])
    groups = cluster(vecs, 0.9)
    assert [g.members for g in groups] == [(0, 1, 2)]
    g = groups[0]
    assert g.similarity == pytest.approx(1 / 1.01, abs=1e-4)  # b·c, the lowest pair
    assert g.keeper == 0  # the medoid
    assert similar_pairs(vecs, 0.9)[0][1:] in ((0, 1), (0, 2))


def test_complete_linkage_does_not_chain_but_single_does():
    a = np.deg2rad([0, 20, 40])
    vecs = np.stack([np.cos(a), np.sin(a)], axis=1).astype(np.float32)  # 20° apart: cos .94
    assert [g.members for g in cluster(vecs, 0.9)] == [(0, 1)]
    assert [g.members for g in cluster(vecs, 0.9, linkage="single")] == [(0, 1, 2)]


def test_cluster_size_cap_and_levels():
    vecs = np.ones((10, 3), np.float32)
    sizes = sorted(len(g.members) for g in cluster(vecs, 0.9, max_size=4))
    assert sizes == [2, 4, 4]
    assert cluster(vecs[:2], 0.9, groups=["planning", "atomic"]) == []
    assert [g.members for g in cluster(vecs[:3], 0.9, groups=["a", "b", "a"])] == [(0, 2)]


# ------------------------------------------------------------------------------ a bank
def _skill(title, rules, level="functional", desc=None, triggers=None, **kw):
    desc = desc or f"How the user wants {title.lower()}."
    return Skill(name=title, title=title, description=desc,
                 instructions=render_body(desc, rules, []), level=level,
                 triggers=triggers or [title.lower()], **kw)


@pytest.fixture
def dup_bank(bank_dir):
    bank = SkillBank(bank_dir)
    same = "How the user wants weekly reports written."
    bank.create(_skill("Weekly report", ["Three sections", "At most 200 words"], desc=same,
                       triggers=["write my weekly report"]))
    bank.create(_skill("Weekly report", ["Three sections", "No emojis"], desc=same,
                       triggers=["weekly status"]))
    bank.create(_skill("Weekly report", ["Three sections", "At most 200 words"], desc=same,
                       level="planning"))
    bank.create(_skill("Cover letter", ["Formal tone", "One page only"]))
    # a hand-written file with CRLF line ends and no trailing newline: restored byte for byte
    d = bank.user_dir("default") / "weekly-report-raw"
    d.mkdir()
    (d / "SKILL.md").write_bytes(
        b"---\r\nname: weekly-report-raw\r\ndescription: How the user wants weekly reports "
        b"written.\r\n---\r\n# Goal\r\n\r\nHow the user wants weekly reports written.\r\n\r\n"
        b"# Constraints & Style\r\n\r\n- Three sections\r\n- Mention blockers first")
    return bank


def _snapshot(bank):
    return {str(p.relative_to(bank.root)): p.read_bytes()
            for p in (bank.root / "Users").rglob("*") if p.is_file()}


def test_plan_is_a_dry_run_with_the_issue_json_shape(dup_bank):
    before = _snapshot(dup_bank)
    plan = make_plan(bank=dup_bank, user="default", embedder=BagEmbedder(), threshold=0.8)
    data = json.loads(json.dumps(plan.to_json()))
    assert set(data) >= {"clusters", "threshold", "n_skills", "merges", "flags"}
    assert len(data["clusters"]) == 1  # the planning-level copy is not grouped with the others
    c = data["clusters"][0]
    assert len(c["skills"]) == 3 and all(p.endswith("SKILL.md") for p in c["skills"])
    assert 0.8 <= c["similarity"] <= 1.0 and c["keeper"] in c["skills"]
    assert data["merges"] == 2 and data["n_skills"] == 5
    assert _snapshot(dup_bank) == before  # nothing written


def test_apply_then_undo_restores_every_byte(dup_bank):
    before = _snapshot(dup_bank)
    plan = make_plan(bank=dup_bank, user="default", embedder=BagEmbedder(), threshold=0.8)
    rec = apply_plan(dup_bank, plan, merge=union_merge)
    assert len(rec.clusters) == 1 and rec.merged == 2
    users = dup_bank.load("default", "user").skills
    assert len(users) == 3
    keeper = next(s for s in users if s.source == "consolidated")
    text = keeper.instructions
    for rule in ("Three sections", "At most 200 words", "No emojis", "Mention blockers first"):
        assert rule in text
    assert {"write my weekly report", "weekly status"} <= set(keeper.triggers)
    assert len(keeper.extra_metadata["consolidated_from"]) == 2
    assert len(list(dup_bank.trash_dir.rglob("SKILL.md"))) == 2
    for c in rec.clusters:  # every original is in the history
        for t in [c["keeper"], *c["trashed"]]:
            assert dup_bank.history.versions(t["id"])
    undone = undo(dup_bank)
    assert undone.status == "undone" and undone.id == rec.id
    assert _snapshot(dup_bank) == before
    assert not list(dup_bank.trash_dir.rglob("SKILL.md"))
    with pytest.raises(NotFoundError):
        undo(dup_bank)  # nothing left to undo


def test_undo_leaves_a_later_hand_edit_alone_unless_forced(dup_bank):
    plan = make_plan(bank=dup_bank, user="default", embedder=BagEmbedder(), threshold=0.8)
    rec = apply_plan(dup_bank, plan)
    path = dup_bank.root / rec.clusters[0]["keeper"]["path"]
    edited = path.read_text("utf-8") + "\n- my own rule\n"
    path.write_text(edited, "utf-8")
    res = undo(dup_bank, rec.id)
    assert res.status == "partial" and res.conflicts
    assert path.read_text("utf-8") == edited
    res = undo(dup_bank, rec.id, force=True)
    assert res.status == "undone"
    assert "my own rule" not in path.read_text("utf-8")
    kid = rec.clusters[0]["keeper"]["id"]
    assert any("my own rule" in v.path.read_text("utf-8")
               for v in dup_bank.history.versions(kid))


def test_a_member_changed_after_the_plan_skips_its_cluster(dup_bank):
    plan = make_plan(bank=dup_bank, user="default", embedder=BagEmbedder(), threshold=0.8)
    victim = plan.clusters[0].skills[1].path
    victim.write_text(victim.read_text("utf-8") + "\n- edited\n", "utf-8")
    rec = apply_plan(dup_bank, plan)
    assert rec.clusters == [] and "changed since the plan" in rec.skipped[0]["reason"]
    assert len(dup_bank.load("default", "user").skills) == 5


def test_common_skills_are_never_merged(dup_bank):
    lib = dup_bank.common_dir / "lib" / "cover-letter-common"
    lib.mkdir(parents=True)
    src = next(p for p in (dup_bank.root / "Users").rglob("SKILL.md") if "cover" in str(p))
    (lib / "SKILL.md").write_bytes(src.read_bytes().replace(b"name: cover-letter",
                                                            b"name: cover-letter-common"))
    common_bytes = (lib / "SKILL.md").read_bytes()
    plan = make_plan(bank=dup_bank, user="default", embedder=BagEmbedder(), threshold=0.8,
                     scope="all")
    cover = [c for c in plan.clusters if any(s.scope == "common" for s in c.skills)]
    assert cover and "read-only" in cover[0].skipped
    apply_plan(dup_bank, plan)
    assert (lib / "SKILL.md").read_bytes() == common_bytes
    assert src.exists()


# ------------------------------------------------------------------------------ merges
def test_llm_merge_repairs_lost_rules_and_falls_back_on_garbage():
    keeper = _skill("Summary style", ["Start with a TL;DR", "Use a formal tone"])
    other = _skill("Summary style", ["Start with a TL;DR", "At most five bullets"])

    class Scripted:  # the model forgets an existing rule: repair_merge puts it back
        def structured(self, name, **values):
            assert name == "merge" and "TL;DR" in values["existing"]
            return {"description": "Summaries.", "constraints": ["At most five bullets"],
                    "goal": "Summaries the user's way.", "workflow": [],
                    "triggers": ["summarize"], "tags": ["summary"]}

    merged, notes = llm_merge(Scripted())(keeper, [other])
    rules = Candidate.from_skill(merged).constraints
    assert {"Start with a TL;DR", "Use a formal tone", "At most five bullets"} <= set(rules)
    assert notes and merged.id == keeper.id

    class Garbage:
        def structured(self, name, **values):
            raise StructuredOutputError("not JSON")

    merged, notes = llm_merge(Garbage())(keeper, [other])
    assert "unusable" in notes[0]
    assert "At most five bullets" in merged.instructions
    assert "Use a formal tone" in merged.instructions


# ------------------------------------------------------------------------------ flags
def test_flags_never_delete(bank_dir):
    bank = SkillBank(bank_dir)
    bank.create(_skill("Helper", ["Be helpful", "Be clear"]))
    bank.create(Skill(name="Empty one", title="Empty one", description="",
                      instructions="# Goal\n\n"))
    bank.create(_skill("Invoice for ACME", ["Send it to bob@acme.com", "Order 88812345"]))
    bank.create(_skill("Deploy script", ["Run scripts/deploy.sh then check references/x.md"],
                       allowed_tools=["Bash", "FrobnicateTool"]))
    blocks = "\n\n".join("pasted log line " * 350 for _ in range(3))  # 3 blocks of ~5.6 KB
    bank.create(Skill(name="Release log", title="Release log", description="A release.",
                      instructions=blocks, triggers=["release"]))
    good = bank.create(_skill("Weekly report", ["Three sections", "At most 200 words"]))
    before = _snapshot(bank)
    flags, path = flag_bank(bank, "default")
    kinds = {f.title: set(f.kinds) for f in flags}
    assert "generic" in kinds["Helper"]
    assert "empty" in kinds["Empty one"]
    assert "one-off" in kinds["Invoice for ACME"]
    assert kinds["Deploy script"] == {"missing-reference"}
    assert kinds["Release log"] == {"one-off"}
    reasons = next(f for f in flags if f.title == "Deploy script").reasons
    assert "scripts/deploy.sh" in reasons[0] and "FrobnicateTool" in reasons[1]
    assert good.title not in kinds
    assert _snapshot(bank) == before and path.is_file()
    assert {f.title for f in load_report(bank.root, "default")} == set(kinds)
    (bank.user_dir("default") / "deploy-script" / "scripts").mkdir()
    (bank.user_dir("default") / "deploy-script" / "scripts" / "deploy.sh").write_text("echo")
    flags, _ = flag_bank(bank, "default", save=False)
    deploy = next(f for f in flags if f.title == "Deploy script")
    assert "scripts/deploy.sh" not in " ".join(deploy.reasons)


# ------------------------------------------------------------------------------ the CLI
def test_cli_dry_run_json_apply_and_undo(dup_bank, capsys):
    from cli.main import main

    before = _snapshot(dup_bank)
    args = ["--bank", str(dup_bank.root), "--threshold", "0.8"]
    assert main(["consolidate", "--dry-run", "--json", *args]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["clusters"] and all(
        isinstance(c["skills"], list) and isinstance(c["similarity"], float)
        for c in data["clusters"])
    assert data["reused_vectors"] == data["n_skills"] == 5  # the desk's stored vectors
    assert _snapshot(dup_bank) == before
    assert main(["consolidate", "--merge", "union", "--json", *args]) == 0
    applied = json.loads(capsys.readouterr().out)["applied"]
    assert applied["merged"] >= 1 and _snapshot(dup_bank) != before
    assert main(["consolidate", "--list", "--bank", str(dup_bank.root)]) == 0
    assert applied["id"] in capsys.readouterr().out
    assert main(["consolidate", "--undo", "--bank", str(dup_bank.root)]) == 0
    assert "undid consolidation" in capsys.readouterr().out
    assert _snapshot(dup_bank) == before
