"""SIGKILL at random points while skills are being written and merged: nothing is lost."""

from __future__ import annotations

import pytest

from bench import crash


@pytest.mark.slow
def test_sigkill_during_writes_loses_no_version(tmp_path):
    rep = crash.run(tmp_path / "bank", kills=30, seed=7)
    assert rep.kills == 30
    assert rep.commits > 30, "the child must have committed writes between kills"
    assert rep.unreadable == []
    assert rep.lost_versions == []


def test_check_detects_a_lost_version(tmp_path):
    """The checker itself can fail: a committed hash that is not in the history is reported."""
    (tmp_path / "bank").mkdir()
    rep = crash.CrashReport()
    crash.check(tmp_path / "bank", {"some-id": {"0" * 64}}, rep)
    assert rep.lost_versions == ["some-id@00000000"]
