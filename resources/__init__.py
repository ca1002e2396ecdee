"""SkillDesk's shipped data: prompts/, themes/, icons/, registry.json (the known models) and
starter/ (the starter skills a new bank receives). Found with ``importlib.resources``
(see :data:`engine.settings.RESOURCES`), so an installed wheel works from any folder."""
