"""A development loop for ``skilldesk bench evolution --replay DIR``: model answers kept by prompt.

The learning loop's model calls are deterministic (greedy JSON, one forward pass for scores),
so a check that runs *after* the model (grounding, case details, names) can be re-measured by
answering every prompt seen before from a file and calling the model only for prompts that
changed. A run with replayed answers measures learning, not cost: its seconds per turn are
meaningless (the table's calls per turn still count every call). Never used by the app.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any


def _key(*parts: Any) -> str:
    blob = json.dumps(parts, ensure_ascii=False, sort_keys=True, default=repr)
    return hashlib.sha1(blob.encode("utf-8")).hexdigest()


class ReplayBackend:
    """Wraps a backend: ``structured`` and ``choice_logprobs`` answers are looked up by their
    whole input in ``folder/<model>.jsonl`` (appended as new answers come); everything else
    goes to the backend."""

    def __init__(self, backend: Any, folder: Path):
        self.backend = backend
        self.file = Path(folder) / f"{getattr(backend, 'name', 'model')}.jsonl".replace("/", "_")
        self.file.parent.mkdir(parents=True, exist_ok=True)
        self.answers: dict[str, Any] = {}
        self.hits = self.misses = 0
        self._lock = threading.Lock()
        if self.file.is_file():
            for line in self.file.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                    self.answers[row["k"]] = row["v"]
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut by a killed run

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def _answer(self, key: str, compute: Any) -> Any:
        with self._lock:
            if key in self.answers:
                self.hits += 1
                return self.answers[key]
        value = compute()
        with self._lock:
            self.misses += 1
            self.answers[key] = value
            with self.file.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"k": key, "v": value}, ensure_ascii=False) + "\n")
        return value

    def structured(self, messages, schema, params=None, cancel=None):
        key = _key("structured", messages, schema, getattr(params, "max_tokens", None))
        return self._answer(key, lambda: self.backend.structured(messages, schema, params,
                                                                 cancel))

    def choice_logprobs(self, messages, prefix, options, cancel=None, **kw):
        key = _key("choice", messages, prefix, options)
        return self._answer(key, lambda: self.backend.choice_logprobs(messages, prefix, options,
                                                                      cancel, **kw))
