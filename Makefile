# The two commands of the README.
#   make run   install everything, then open SkillDesk
#   make test  install everything, then run the whole check (what CI runs)
.PHONY: run test setup model

setup:
	@bash scripts/setup.sh

model: setup
	@.venv/bin/skilldesk models install recommended

run: model
	@.venv/bin/skilldesk

test: setup
	@bash scripts/test.sh
