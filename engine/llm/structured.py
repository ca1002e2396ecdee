"""Parsing and validating a model's structured (JSON) answer, shared by every backend.

A malformed or schema-violating answer raises :class:`~engine.errors.StructuredOutputError`;
callers (learning) turn that into a discard, never a crash and never a junk skill.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from engine.errors import StructuredOutputError


def check_schema(schema: dict[str, Any]) -> None:
    """Raise ``StructuredOutputError`` when ``schema`` itself is not a valid JSON schema."""
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise StructuredOutputError(f"invalid JSON schema: {exc.message}") from None


def parse_and_validate(text: str, schema: dict[str, Any],
                       finish_reason: str | None = None) -> dict[str, Any]:
    """``text`` as a JSON object that matches ``schema``, else ``StructuredOutputError``."""
    stripped = (text or "").strip()
    if stripped.startswith("```"):  # remote models without constrained decoding like fences
        stripped = stripped.strip("`")
        stripped = stripped[4:] if stripped.lower().startswith("json") else stripped
    if not stripped:
        raise StructuredOutputError("the model returned an empty answer instead of JSON")
    try:
        value = json.loads(stripped)
    except ValueError as exc:
        cut = " (it hit the token limit)" if finish_reason == "length" else ""
        raise StructuredOutputError(f"the model's answer is not valid JSON{cut}: {exc}") from None
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise StructuredOutputError(f"the model's answer does not match the schema at "
                                    f"{where}: {error.message}")
    if not isinstance(value, dict):
        raise StructuredOutputError("the model's answer is JSON but not an object")
    return value
