"""`skilldesk search` / `skilldesk index` from the command line, and the retrieval bench."""

from __future__ import annotations

import json

import pytest

from cli.main import main
from tests.engine.retrieval.test_retrieval import make_bank


def test_search_queries_jsonl_format(bank_dir, tmp_path, capsys):
    make_bank(bank_dir)
    qfile = tmp_path / "q.jsonl"
    queries = ["write my weekly report", "帮我写周报", "zzzz qqqq"]
    qfile.write_text("\n".join(json.dumps({"query": q}, ensure_ascii=False) for q in queries)
                     + "\n\n", encoding="utf-8")
    assert main(["search", "--queries", str(qfile), "--json", "--bank", str(bank_dir)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3
    rows = [json.loads(x) for x in lines]
    assert [r["query"] for r in rows] == queries  # in order
    for r in rows:
        assert set(r) == {"query", "latency_ms", "hits"}
        assert isinstance(r["latency_ms"], float) and r["latency_ms"] > 0
        for h in r["hits"]:
            assert set(h) == {"id", "name", "title", "path", "score", "dense", "lexical"}
            assert h["path"].endswith("SKILL.md") and h["path"].startswith(str(bank_dir))
            assert 0 <= h["lexical"] <= 1 and 0 <= h["dense"] <= 1 and 0 < h["score"] <= 1
    assert rows[0]["hits"][0]["title"] == "Weekly report format"
    assert rows[1]["hits"][0]["title"] == "周报生成"


def test_search_one_query_table_and_json(bank_dir, capsys):
    make_bank(bank_dir)
    assert main(["search", "my SQL query is slow", "--bank", str(bank_dir), "--top-k", "1"]) == 0
    out = capsys.readouterr().out
    assert "SQL query tuning" in out and "Weekly" not in out
    assert main(["search", "my SQL query is slow", "--bank", str(bank_dir), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["hits"][0]["name"] == "sql-query-tuning"


@pytest.mark.parametrize("argv,needle", [
    (["--user", "../x"], "user"),
    (["--bank", "/nonexistent/bank/dir"], "does not exist"),
])
def test_bad_user_or_bank_is_a_one_line_error(bank_dir, capsys, argv, needle):
    make_bank(bank_dir)
    args = ["search", "weekly report"] + (argv if "--bank" in argv else
                                           ["--bank", str(bank_dir)] + argv)
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("skilldesk: error:") and needle in err and "\n" not in err


def test_bad_queries_file_is_a_one_line_error(bank_dir, tmp_path, capsys):
    make_bank(bank_dir)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "ok"}\nnot json\n')
    assert main(["search", "--queries", str(bad), "--bank", str(bank_dir)]) == 1
    assert "bad.jsonl:2" in capsys.readouterr().err


def test_index_prints_counts_and_reuses_the_cache(bank_dir, capsys):
    make_bank(bank_dir)
    assert main(["index", "--bank", str(bank_dir)]) == 0
    out = capsys.readouterr().out
    assert "5 skills" in out and "embedded 5" in out and "vector cache: missing" in out
    assert main(["index", "--bank", str(bank_dir), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["embedded"] == 0 and info["reused"] == 5 and info["cache"] == "reused"


@pytest.mark.slow
def test_bench_retrieval_runs_small(corpus, tmp_path, capsys):
    from tests.conftest import copy_corpus_subset

    small = tmp_path / "corpus"
    small.mkdir()
    copy_corpus_subset(corpus / "ConvSkill" / "chinese_gpt4_8", small / "zh", 40)
    copy_corpus_subset(corpus / "ConvSkill" / "english_gpt4_8", small / "en", 40)
    from bench.retrieval import main as bench

    assert bench(["--corpus", str(small), "--embedders", "use", "--quick", "--sizes", "300",
                  "--edits", "3", "--build-n", "20", "--folds", "2",
                  "--cache", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    for title in ("Held-out triggers, tune half", "Held-out triggers, heldout half",
                  "Off-topic and paraphrase sets skipped", "Selection options", "Threshold",
                  "Search latency", "Cold bank", "Edit-to-searchable"):
        assert title in out
    assert "80 skills loaded" in out
