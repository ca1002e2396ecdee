"""SkillDesk's benchmarks: ``skilldesk bench <name>`` runs ``bench.<name>.main(argv)``.

Each bench is one module here with ``main(argv: list[str]) -> int`` that parses its own
arguments (accepting ``--bank DIR`` and ``--user U``, which ``skilldesk bench`` forwards when
given) and prints a plain-text table. Modules are imported only when their bench runs.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from engine.errors import NotFoundError

BENCHES = ["chat", "retrieval", "evolution", "triage", "replace", "instance", "prefeval", "bank",
           "proxy", "skillx", "fuzz", "about"]


def load(name: str) -> ModuleType:
    """The module of bench ``name``; ``NotFoundError`` when it is unknown or not written yet."""
    if name not in BENCHES:
        raise NotFoundError(f"no benchmark named '{name}'; known: {', '.join(BENCHES)}")
    module_name = f"{__name__}.{name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise  # the bench exists but one of its imports is missing: a real error
        raise NotFoundError(f"the '{name}' benchmark is not available in this build "
                            f"(bench/{name}.py is missing)") from None
    if not callable(getattr(module, "main", None)):
        raise NotFoundError(f"bench/{name}.py has no main(argv) function")
    return module
