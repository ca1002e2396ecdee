"""The held-out-trigger bench's reading of its misses (no model, no index)."""

from __future__ import annotations

from bench import _retrieval_quality as Q
from engine.bank.skill import Skill
from engine.retrieval.index import skill_key


def test_a_miss_counts_as_a_copy_only_when_its_first_hit_has_the_very_name_or_description():
    skills = [Skill(name="a", title="Meeting notes", description="Turn notes into minutes."),
              Skill(name="b", title="meeting  NOTES", description="Something else."),
              Skill(name="c", title="Recipes", description="Turn notes into minutes."),
              Skill(name="d", title="Recipes from leftovers", description="Cook what is left."),
              Skill(name="e", title="Poems", description="Write a poem.")]
    k = [skill_key(s) for s in skills]
    outs = [Q.Outcome("en", 2, 0.5, key=k[0], top=k[1]),    # same name (case, spaces)
            Q.Outcome("en", None, 0.0, key=k[0], top=k[2]),  # same description
            Q.Outcome("en", 3, 0.4, key=k[3], top=k[2]),    # a look-alike, not a copy
            Q.Outcome("en", 1, 0.9, key=k[4], top=k[4]),    # found: no miss
            Q.Outcome("en", None, 0.0, key=k[4], top=""),   # nothing selected
            Q.Outcome("zh", 2, 0.5, key=k[0], top=k[1])]    # another language
    c = Q.copy_misses(outs, skills, "en")
    assert c == {"n": 5, "miss": 4, "name": 1, "description": 1, "either": 2}
