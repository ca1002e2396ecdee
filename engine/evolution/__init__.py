"""The background learning loop (AutoSkill §3.4): gate → extract → check → judge → merge/add.

- :mod:`.gate` — the cheap durable-signal gate and the extraction windows (no model);
- :mod:`.candidate` — candidate skills and the SKILL.md body they render to;
- :mod:`.checks` — deterministic junk checks and merge repair;
- :mod:`.rules` — rule-based extraction for models too weak to extract (tiny tier);
- :mod:`.client` — prompt calls on the ModelWorker at BACKGROUND priority;
- :mod:`.pipeline` — one conversation through the whole loop (and the per-tier step policy);
- :mod:`.queue` — :class:`EvolutionQueue`, the observable background thread;
- :mod:`.oracle` — a scripted model for tests and the benchmark only.
"""

from .events import Action, EvolutionEvent, EvolutionReport
from .pipeline import Neighbour, Pipeline
from .queue import EvolutionQueue

__all__ = ["Action", "EvolutionEvent", "EvolutionQueue", "EvolutionReport", "Neighbour",
           "Pipeline"]
