"""Property-based fuzzing of every reader of outside input (hypothesis).

Each reader gets arbitrary bytes, arbitrary JSON/YAML trees (deep, wide, wrong types, huge
strings), values nested up to 200,000 levels, and mutated real files from ``shared/corpora``
(see bench/fuzz_targets.py). A reader must return a value or raise ``SkillDeskError`` with a
one-line reason; anything else fails the test, with the input hypothesis shrank it to.

Budget: ``SKILLDESK_FUZZ_EXAMPLES`` cases per reader (default 40: the 13 readers take ~15-25 s on
a loaded 2-core machine); ``skilldesk bench fuzz`` runs the same targets far longer.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings

from bench.fuzz_targets import readers

EXAMPLES = int(os.environ.get("SKILLDESK_FUZZ_EXAMPLES", "40"))


@pytest.mark.parametrize("reader", readers(), ids=lambda r: r.name)
def test_reader_is_total(reader):
    # deadline: one case may take seconds (a 1 MB file, a 200,000-deep tree) but never hang
    @settings(max_examples=EXAMPLES, deadline=timedelta(seconds=20), database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.filter_too_much],
              print_blob=True)
    @given(reader.strategy)
    def run(data):
        reader.target(data)

    run()
