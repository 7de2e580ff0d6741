#!/usr/bin/env bash
# N replicas of `streamlit run app.py` behind nginx on this host; Ctrl-C stops them all.
#   deploy/run.sh 4 [--port 8501] [--cores-per-replica 2]      (python deploy/launch.py --help)
# PYTHON picks the interpreter (default: .venv/bin/python when there is one, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
exec "$PYTHON" deploy/launch.py "$@"
