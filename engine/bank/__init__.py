"""The skill bank: the skill model, SKILL.md read/write, the store, history, transfer, the watcher."""
