"""JSON schema -> llama.cpp GBNF grammar, with the numeric bounds the stock converter ignores.

llama-cpp-python's ``json_schema_to_gbnf`` drops ``minimum``/``maximum``, so a constrained
model can still answer ``"confidence": 2`` for a ``[0, 1]`` number and fail validation. Before
converting we rewrite small bounded numbers into forms the grammar can enforce:

- an integer with ``0 <= minimum`` and ``maximum - minimum <= 100`` becomes an ``enum``;
- a number with integer bounds ``0 <= minimum < maximum`` (range <= 20) becomes a dedicated
  rule: an integer part in ``[minimum, maximum)`` with up to 3 decimals, or ``maximum`` itself.

Property order is kept as written (the model writes fields in that order, which matters for
small models). Anything the rewrite does not cover is left to jsonschema validation.
"""

from __future__ import annotations

import copy
import json
import math
import re
from typing import Any

_PLACEHOLDER = "__skilldesk_number_{}__"
_VALUE_KEYS = {"enum", "const", "default", "examples", "required"}  # data, not sub-schemas
_CHAR_RULE = re.compile(r'^(char ::= )\[\^"\\\\\]', re.M)
_STRICT_CHAR = r'[^"\\\x7F\x00-\x1F]'  # any char but quote, backslash, controls
_LITERAL = re.compile(r'"\\"__skilldesk_number_(\d+)__\\""')


def _int_bound(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(value) if float(value).is_integer() else None


def _number_rule(lo: int, hi: int) -> str:
    frac = '("." [0-9] [0-9]? [0-9]?)?'
    alts = [f'"{k}" {frac}' for k in range(lo, hi)] + [f'"{hi}" ("." "0")?']
    return "(" + " | ".join(alts) + ") space"


def _rewrite(node: Any, rules: list[str]) -> Any:
    if isinstance(node, list):
        return [_rewrite(x, rules) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: v if k in _VALUE_KEYS else _rewrite(v, rules) for k, v in node.items()}
    lo, hi = _int_bound(node.get("minimum")), _int_bound(node.get("maximum"))
    if lo is None or hi is None or lo < 0 or hi <= lo or "enum" in node or "const" in node:
        return out
    if node.get("type") == "integer" and hi - lo <= 100:
        return {"enum": list(range(lo, hi + 1))}
    if node.get("type") == "number" and hi - lo <= 20:
        rules.append(_number_rule(lo, hi))
        return {"const": _PLACEHOLDER.format(len(rules) - 1)}
    return out


def schema_to_gbnf(schema: dict[str, Any]) -> str:
    """A GBNF grammar that only admits JSON matching ``schema`` (as far as GBNF can say)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    rules: list[str] = []
    rewritten = _rewrite(copy.deepcopy(schema), rules)
    gbnf = _strict_chars(json_schema_to_gbnf(json.dumps(rewritten)))
    if rules:
        gbnf = _LITERAL.sub(lambda m: rules[int(m.group(1))], gbnf)
        if "__skilldesk_number_" in gbnf:  # the converter formatted it differently: be safe
            return _strict_chars(json_schema_to_gbnf(json.dumps(schema)))
    return gbnf


def _strict_chars(gbnf: str) -> str:
    """JSON forbids raw control characters in strings; the stock ``char`` rule allows them."""
    return _CHAR_RULE.sub(lambda m: m.group(1) + _STRICT_CHAR, gbnf)
