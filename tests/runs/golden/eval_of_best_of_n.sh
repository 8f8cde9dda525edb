#!/usr/bin/env bash
# rlvr-run eval run 5a45b5f06070 (bon:every_phase@1) of spec golden.
# Rendered from templates/launch/eval.sh.j2; edit the template, not this file.
# Everything it writes stays inside the run directory.
set -euo pipefail
# A Ray job without shared storage runs in its own copy of the run directory (RLVR_RUN_DIR).
RUN_DIR=${RLVR_RUN_DIR:-/runs/golden/5a45b5f06070}
cd "$RUN_DIR"
mkdir -p logs outputs
export RLVR_RUN_ID=5a45b5f06070
RLVR_PYTHON="${RLVR_PYTHON:-python3}"
# The executor sets one attempt id per try; a manual run gets a timestamp.
export RLVR_ATTEMPT="${RLVR_ATTEMPT:-$(date -u +%Y%m%dT%H%M%SZ)}"
# Scores the samples its best-of-n parent generated; no generation here.
"$RLVR_PYTHON" -m engine.cli evaluate --run-dir "$RUN_DIR" --model /runs/golden/38b088b59681/model \
    --samples /runs/golden/da018ad8c728/outputs/samples --backend "${RLVR_EVAL_BACKEND:-auto}"
