"""Child process of the SIGKILL crash test: creates and merges skills in a loop, forever.

After each write returns it prints ``COMMIT <skill-id> <version> <sha256>`` (flushed), so the
parent knows which versions were promised durable before it killed us.
"""

from __future__ import annotations

import random
import sys

from engine.bank.skill import Skill
from engine.bank.store import SkillBank
from engine.errors import ConflictError


def main(bank_dir: str, seed: int) -> None:
    rng = random.Random(seed)
    bank = SkillBank(bank_dir)
    out = sys.stdout
    while True:
        skills = bank.load("default").skills
        if len(skills) < 5 or rng.random() < 0.2:
            s = bank.create(Skill(name="s", title=f"crash skill {rng.randrange(10**6)}",
                                  description="A skill written by the crash test.",
                                  instructions="# Goal\nSurvive SIGKILL.\n" + "- rule\n" * 50))
        else:
            cur = rng.choice(skills)
            try:
                s = bank.write(cur.copy(instructions=cur.instructions + f"\n- rule {rng.random()}"),
                               expected_hash=cur.content_hash)
            except ConflictError:
                continue
        out.write(f"COMMIT {s.id} {s.version} {s.content_hash}\n")
        out.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
