#!/usr/bin/env bash
# Open the real app (as `skilldesk` does) under Xvfb on a bank of 34 hostile SKILL.md files plus
# good ones, with a hand-broken settings.json, and save a screenshot of the screen.
#   scripts/hostile_bank_shot.sh OUT.png [PYTHON]
# SHOT_VIEW=good: fold the "Can't read" list and show the good skills instead.
set -euo pipefail
out=$(realpath -m "$1"); py=${2:-python}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/skilldesk-hostile-XXXX)
export SKILLDESK_HOME="$work/home" PYTHONPATH="$here" QT_QPA_PLATFORM=xcb
mkdir -p "$SKILLDESK_HOME"
"$py" - "$work/bank" <<'PY'
import json, sys
from pathlib import Path
from bench._fuzz_inputs import build_hostile_bank
from engine.settings import Settings
good, bad = build_hostile_bank(Path(sys.argv[1]))
print(f"bank: {len(good)} good skills, {len(bad)} hostile files")
# a hand edit gone wrong: a string where a number belongs, and an unknown key
Settings.path().write_text(json.dumps({"bank": sys.argv[1], "retrieval": {"top_k": "many"},
                                       "colour": "red"}), encoding="utf-8")
PY
# the app as `skilldesk` starts it (desktop.app.run_app's steps), maximised, the skill tree
# given most of the height, and one unreadable file selected so its reason shows
cat > "$work/open.py" <<'PY'
import os
import sys
from pathlib import Path
from PySide6.QtCore import QTimer
from desktop.app import create_window, ensure_app
app = ensure_app()
w = create_window(None)
w.setGeometry(0, 0, 1500, 950)
w.show()
def arrange():
    w.skills_split.setSizes([680, 190])
    w.split.setSizes([200, 560, 740])
    w.tree.select_path(str(Path(sys.argv[1]) / "Common/shared-zip/deep-flow-100k/SKILL.md"))
    if os.environ.get("SHOT_VIEW") == "good":  # the good skills: Can't read folded away
        w.tree.tree.expandAll()
        w.tree.tree.topLevelItem(0).setExpanded(False)
        w.tree.tree.scrollToTop()
QTimer.singleShot(8000, arrange)
sys.exit(app.exec())
PY
xvfb-run -a -s "-screen 0 1500x950x24" bash -c "
  cd '$here' && '$py' '$work/open.py' '$work/bank' & app=\$!
  sleep \${SHOT_WAIT:-30}
  import -window root '$out'
  kill \$app; wait \$app || true"
echo "saved $out (work folder $work)"
