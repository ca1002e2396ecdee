"""The SIGKILL crash test: kill a writing child at random points; nothing may be lost.

After every kill: every SKILL.md in the bank parses, and every version the child reported as
committed is in the history (and the current file equals the newest committed version or a
newer one). Used by ``skilldesk bench bank`` (200 kills) and by the test suite (fewer).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.bank import skillfile
from engine.bank.store import SkillBank
from engine.errors import SkillFormatError


@dataclass
class CrashReport:
    kills: int = 0
    commits: int = 0
    skills: int = 0
    unreadable: list[str] = field(default_factory=list)
    lost_versions: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.unreadable and not self.lost_versions and self.commits > 0


def run(bank_dir: Path, kills: int = 200, seed: int = 0, max_delay: float = 0.25) -> CrashReport:
    rng = random.Random(seed)
    rep = CrashReport()
    committed: dict[str, set[str]] = {}
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    for i in range(kills):
        child = subprocess.Popen(
            [sys.executable, "-m", "bench.crash_child", str(bank_dir), str(seed + i)],
            stdout=subprocess.PIPE, text=True, env=env)
        time.sleep(0.15 + rng.random() * max_delay)  # ~0.15 s is interpreter start-up
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate()
        rep.kills += 1
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "COMMIT":
                committed.setdefault(parts[1], set()).add(parts[3])
                rep.commits += 1
        check(bank_dir, committed, rep)
        if rep.unreadable or rep.lost_versions:
            break
    rep.seconds = time.perf_counter() - t0
    rep.skills = len(committed)
    return rep


def check(bank_dir: Path, committed: dict[str, set[str]], rep: CrashReport) -> None:
    bank = SkillBank(bank_dir)
    for f in bank.users_dir.rglob("SKILL.md"):
        try:
            skillfile.read(f)
        except SkillFormatError as exc:
            rep.unreadable.append(str(exc))
    for skill_id, hashes in committed.items():
        stored = {v.content_hash for v in bank.history.versions(skill_id)}
        rep.lost_versions += [f"{skill_id}@{h[:8]}" for h in hashes - stored]
