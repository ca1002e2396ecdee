"""Hybrid retrieval: tokenizer, BM25, fusion policy, and the desk over real banks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.bank.skill import Skill
from engine.bank.store import SkillBank
from engine.desk import SkillDesk
from engine.errors import NotFoundError, UnsafePathError
from engine.retrieval.document import retrieval_text, text_hash
from engine.retrieval.fusion import Candidates, FusionParams, select
from engine.retrieval.lexical import LexicalIndex
from engine.retrieval.tokenize import tokenize
from engine.settings import Settings

SKILLS = [
    ("Weekly report format", "Write weekly status reports in three parts: progress, risks, "
     "next week.", ["write my weekly report", "weekly status update"], ["reporting"]),
    ("Python unit tests with pytest", "Write pytest tests with fixtures and parametrize, "
     "never unittest classes.", ["write tests for this function", "add pytest tests"],
     ["python", "testing"]),
    ("周报生成", "按照进展、风险、下周计划三段式撰写每周工作周报。", ["帮我写周报", "生成本周工作总结"],
     ["周报", "写作"]),
    ("PyTorch代码向量化优化", "将嵌套循环的PyTorch代码优化为向量化操作，提升计算效率。",
     ["如何优化这段PyTorch代码", "消除嵌套循环"], ["PyTorch", "性能优化"]),
    ("SQL query tuning", "Speed up slow SQL queries with indexes and EXPLAIN plans.",
     ["my query is slow", "optimize this SQL"], ["database"]),
]


def make_bank(root, specs=SKILLS, user="default") -> SkillBank:
    bank = SkillBank(root)
    for title, desc, triggers, tags in specs:
        bank.create(Skill(name=title, title=title, description=desc, triggers=triggers,
                          tags=tags, instructions=f"# Goal\n{desc}\n\n# Constraints & Style\n"
                          "- Keep it short.\n"), user)
    return bank


def open_desk(root, **kw) -> SkillDesk:
    return SkillDesk.open(root, "default", Settings(), **kw)


def titles(hits) -> list[str]:
    return [h.skill.title for h in hits]


# ---------------------------------------------------------------------------- unit level
def test_tokenizer_stems_english_and_bigrams_cjk():
    toks = tokenize("Running the weekly Reports, 24_game_expert 帮我写周报")
    assert {"run", "week", "report", "24", "game", "expert"} <= set(toks)
    assert "the" not in toks  # stop word
    assert {"帮我", "我写", "写周", "周报"} <= set(toks)
    assert tokenize("周") == ["周"]


def test_bm25_zero_scores_are_not_hits():
    lex = LexicalIndex()
    lex.build({"a": ("1", "weekly report format"), "b": ("2", "周报生成"),
               "c": ("3", "sql tuning")})
    hits, ceiling, _ = lex.search("weekly reports", 10)
    assert [k for k, _ in hits] == ["a"] and ceiling > 0
    assert lex.search("写周报", 10)[0][0][0] == "b"
    assert lex.search("quantum chromodynamics", 10)[0] == []


def test_text_hash_changes_only_with_text():
    s = Skill(name="x", description="d", triggers=["t"], instructions="body")
    a = text_hash(retrieval_text(s))
    assert text_hash(retrieval_text(s.copy(version="9.9.9", updated="now"))) == a
    assert text_hash(retrieval_text(s.copy(description="other"))) != a
    assert "t" not in retrieval_text(s, exclude_triggers=True).split("\n")


def _cands(scores, vecs, bm25=None):
    vecs = np.asarray(vecs, dtype=np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    keys = [f"k{i}" for i in range(len(scores))]
    bm = np.asarray(bm25 if bm25 is not None else [0.0] * len(scores), dtype=np.float32)
    return Candidates(keys, np.asarray(scores, dtype=np.float32), bm, 1.0, vecs)


def test_fusion_threshold_window_dedup_and_mmr():
    c = _cands([0.9, 0.89, 0.6, 0.2], [[1, 0, 0], [1, 0.01, 0], [0, 1, 0], [0, 0, 1]])
    dense_only = FusionParams(lam=1.0, dedup=None, top_k=4)
    assert [i for i, *_ in select(c, dense_only)] == [0, 1, 2, 3]
    assert [i for i, *_ in select(c, dense_only.with_(threshold=0.5))] == [0, 1, 2]
    assert [i for i, *_ in select(c, dense_only.with_(window=0.35))] == [0, 1, 2]
    # near-duplicate (cos > 0.95) of a better hit is dropped
    assert [i for i, *_ in select(c, dense_only.with_(dedup=0.95))] == [0, 2, 3]
    # MMR prefers the diverse hit over the near-copy once one is chosen
    assert [i for i, *_ in select(c, dense_only.with_(mmr=0.5, top_k=2))] == [0, 2]
    # lexical-only: a zero BM25 score is never a hit
    c2 = _cands([0.5, 0.5], [[1, 0], [0, 1]], bm25=[0.7, 0.0])
    assert [i for i, *_ in select(c2, FusionParams(lam=0.0, dedup=None))] == [0]


# ---------------------------------------------------------------------------- desk level
def test_empty_bank(bank_dir):
    with open_desk(bank_dir) as desk:
        assert desk.search("anything") == []
        assert desk.render_context("anything") == ""
        assert len(desk.index) == 0


def test_bank_of_one(bank_dir):
    make_bank(bank_dir, SKILLS[:1])
    with open_desk(bank_dir) as desk:
        hits = desk.search("please write my weekly report")
        assert titles(hits) == ["Weekly report format"]
        assert 0 < hits[0].score <= 1 and 0 <= hits[0].dense <= 1 and 0 <= hits[0].lexical <= 1
        ctx = desk.render_context("please write my weekly report")
        assert "Weekly report format" in ctx


def test_english_and_cjk_queries(bank_dir):
    make_bank(bank_dir)
    with open_desk(bank_dir) as desk:
        assert titles(desk.search("write my weekly report", 1)) == ["Weekly report format"]
        assert titles(desk.search("帮我写一份本周的周报", 1)) == ["周报生成"]
        assert titles(desk.search("这段PyTorch代码太慢了，怎么优化", 1)) == ["PyTorch代码向量化优化"]
        assert titles(desk.search("my SQL query is slow", 1)) == ["SQL query tuning"]
        assert all(h.skill.scope == "user" for h in desk.search("weekly report", scope="user"))
        assert desk.search("weekly report", scope="common") == []


def test_deleted_skill_is_never_returned(bank_dir):
    bank = make_bank(bank_dir)
    with open_desk(bank_dir) as desk:
        gone = next(s for s in desk.skills if s.title == "SQL query tuning")
        bank.delete(gone)
        desk.refresh([gone.path])
        for q in ("SQL query tuning", "my query is slow", "optimize this SQL"):
            assert "SQL query tuning" not in titles(desk.search(q, 5, threshold=0.0))
    # the saved cache no longer has it, and a fresh open does not resurrect it
    with open_desk(bank_dir) as desk:
        assert "SQL query tuning" not in titles(desk.search("optimize this SQL", 5,
                                                            threshold=0.0))
        assert len(desk.index.dense) == 4


def test_only_changed_skills_are_reembedded(bank_dir):
    bank = make_bank(bank_dir)
    with open_desk(bank_dir) as desk:
        assert desk.last_report.dense.embedded == 5
    with open_desk(bank_dir) as desk:
        assert desk.index.cache_status == "" and desk.last_report.dense.embedded == 0
        s = next(s for s in desk.skills if s.title == "Weekly report format")
        bank.write(s.copy(description="Weekly reports as a table of wins and blockers."),
                   expected_hash=s.content_hash)
        rep = desk.refresh([s.path])
        assert rep.updated and rep.dense.embedded == 1
        assert desk.refresh([s.path]).dense.embedded == 0  # same content: nothing to do


@pytest.mark.parametrize("damage", ["truncate", "flip", "meta-garbage", "meta-missing"])
def test_corrupted_cache_is_rebuilt(bank_dir, damage):
    make_bank(bank_dir)
    with open_desk(bank_dir) as desk:
        hnsw, meta = desk.index.dense.files
    assert hnsw.parent == bank_dir / "vectors" and hnsw.is_file() and meta.is_file()
    data = hnsw.read_bytes()
    if damage == "truncate":
        hnsw.write_bytes(data[: len(data) // 3])
    elif damage == "flip":
        hnsw.write_bytes(data[:100] + bytes(b ^ 0xFF for b in data[100:400]) + data[400:])
    elif damage == "meta-garbage":
        meta.write_text("{not json")
    else:
        meta.unlink()
    with open_desk(bank_dir) as desk:
        assert desk.index.cache_status != ""
        assert desk.last_report.dense.embedded == 5  # rebuilt from the texts
        assert titles(desk.search("write my weekly report", 1)) == ["Weekly report format"]
    with open_desk(bank_dir) as desk:  # and the rebuilt cache is good again
        assert desk.index.cache_status == "" and desk.last_report.dense.embedded == 0


def test_stale_cache_entries_are_not_trusted(bank_dir):
    make_bank(bank_dir)
    with open_desk(bank_dir) as desk:
        meta_path = desk.index.dense.files[1]
    meta = json.loads(meta_path.read_text())
    meta["items"] = {k: [lab, "0" * 32] for k, (lab, _h) in meta["items"].items()}
    meta_path.write_text(json.dumps(meta))  # metadata edited: checksum still fine
    with open_desk(bank_dir) as desk:
        assert desk.last_report.dense.embedded == 5  # every hash disagrees: re-embedded


@pytest.mark.slow
def test_switching_embedders_never_mixes_vectors(bank_dir):
    make_bank(bank_dir)
    with open_desk(bank_dir, embedder="use") as desk:
        use_sig = desk.index.embedder.signature
        assert desk.index.embedder.dim == 512
    with open_desk(bank_dir, embedder="minilm") as desk:
        mini_sig = desk.index.embedder.signature
        assert mini_sig != use_sig and desk.index.embedder.dim == 384
        assert desk.index.cache_status == "missing" and desk.last_report.dense.embedded == 5
        assert titles(desk.search("write my weekly report", 1)) == ["Weekly report format"]
    files = {p.name for p in (bank_dir / "vectors").iterdir()}
    assert {f"{sig}.default{suffix}" for sig in (use_sig, mini_sig)
            for suffix in (".hnsw", ".json")} <= files
    # one embedder's files presented under the other's name are refused, not loaded
    for suffix in (".hnsw", ".json"):
        (bank_dir / "vectors" / f"{use_sig}.default{suffix}").write_bytes(
            (bank_dir / "vectors" / f"{mini_sig}.default{suffix}").read_bytes())
    with open_desk(bank_dir, embedder="use") as desk:
        assert desk.index.cache_status == "other embedder"
        assert desk.last_report.dense.embedded == 5
        assert titles(desk.search("帮我写周报", 1)) == ["周报生成"]


def test_bad_user_and_missing_bank(bank_dir, tmp_path):
    with pytest.raises(UnsafePathError):
        SkillDesk.open(bank_dir, "../evil", Settings())
    with pytest.raises(NotFoundError):
        SkillDesk.open(tmp_path / "nope", "default", Settings())


def test_two_users_keep_separate_caches(bank_dir):
    bank = make_bank(bank_dir, SKILLS[:2], user="alice")
    make_bank(bank_dir, SKILLS[2:4], user="bob")
    bank.create(Skill(name="shared", title="Shared style guide", description="House style.",
                      instructions="x"), "alice")
    with SkillDesk.open(bank_dir, "alice", Settings()) as a, \
            SkillDesk.open(bank_dir, "bob", Settings()) as b:
        assert a.index.dense.files != b.index.dense.files
        assert titles(b.search("帮我写周报", 1)) == ["周报生成"]
        assert "周报生成" not in titles(a.search("帮我写周报", 3, threshold=0.0))
    with SkillDesk.open(bank_dir, "alice", Settings()) as a:
        assert a.index.cache_status == "" and a.last_report.dense.embedded == 0
