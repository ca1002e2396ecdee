#!/usr/bin/env bash
# The whole check, exactly what CI runs: lint, the architecture contract, then the test suite.
set -uo pipefail
cd "$(dirname "$0")/.."
export QT_QPA_PLATFORM=${QT_QPA_PLATFORM:-offscreen}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# Tests never touch the user's real settings, bank or chat history.
export SKILLDESK_HOME=${SKILLDESK_HOME:-$(mktemp -d)}
unset SKILLDESK_BANK SKILLDESK_MODEL

step() { printf '\n\033[1;34m== %s\033[0m\n' "$*"; }

step "ruff"
.venv/bin/ruff check engine desktop cli server bench tests || exit 1
step "import-linter"
.venv/bin/lint-imports || exit 1
step "recommended model (for the end-to-end learning test; cached after the first run)"
.venv/bin/skilldesk models install recommended || exit 1
step "pytest"
.venv/bin/python -m pytest "$@"
rc=$?
if [[ $rc == 5 ]]; then
  echo "FAILED: pytest collected no tests; an empty suite is a failure, not a pass." >&2
  exit 1
fi
exit $rc
