"""The background learning loop (AutoSkill §3.4): triage → extract → check → judge → merge/add.

Read it in the order a conversation flows through it:

- :mod:`.triage` — which user turns may hold something durable, and the extraction windows;
- :mod:`.rules` — rule-based extraction (the tiny tier, and the capable tier's backup);
- :mod:`.candidate` — a candidate skill and the SKILL.md body it renders to;
- :mod:`.checks` — deterministic junk checks and merge repair;
- :mod:`.pipeline` — one conversation through the whole loop (steps per tier: engine.llm.tiers);
- :mod:`.events` — what the loop did (add / merge / discard / error), for the log and undo;
- :mod:`.queue` — :class:`LearningQueue`, the observable background thread, with undo.

Model calls go through :class:`engine.llm.client.LLMClient` at background priority.
"""

from engine.learning.events import Action, LearningEvent, LearningReport
from engine.learning.pipeline import Neighbour, Pipeline
from engine.learning.queue import LearningQueue

__all__ = ["Action", "LearningEvent", "LearningQueue", "LearningReport", "Neighbour",
           "Pipeline"]
