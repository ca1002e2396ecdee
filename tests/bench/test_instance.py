from bench.instance import score, window

SC = {"messages": [
    {"role": "user", "content": "Plan a weekend in Porto for my wife and me."},
    {"role": "assistant", "content": "Day one…"},
    {"role": "user", "content": "I get seasick, so no boat trips for me."}],
    "expect": [{"evidence": "seasick", "constraints": ["No boat trips: the user gets seasick"],
                "name": "Trips without boats", "description": "Trips leave boats out.",
                "triggers": ["plan a trip"], "forbid": ["porto", "wife", "seasick"]}]}


def test_the_instance_bench_reads_the_request_before_the_rule_turn_as_the_case():
    assert window(SC, SC["expect"][0]) == (["I get seasick, so no boat trips for me."],
                                           ["Plan a weekend in Porto for my wife and me."])
    # the case words of the request are found; the rule's own word is not case
    assert score([SC]) == {"forbid": 3, "found": 2, "words": 7, "stripped": 0}
