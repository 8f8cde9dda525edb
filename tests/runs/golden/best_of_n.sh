#!/usr/bin/env bash
# rlvr-run best_of_n run da018ad8c728 (bon@1) of spec golden.
# Rendered from templates/launch/best_of_n.sh.j2; edit the template, not this file.
# Everything it writes stays inside the run directory.
set -euo pipefail
# A Ray job without shared storage runs in its own copy of the run directory (RLVR_RUN_DIR).
RUN_DIR=${RLVR_RUN_DIR:-/runs/golden/da018ad8c728}
cd "$RUN_DIR"
mkdir -p logs outputs
export RLVR_RUN_ID=da018ad8c728
RLVR_PYTHON="${RLVR_PYTHON:-python3}"
# The executor sets one attempt id per try; a manual run gets a timestamp.
export RLVR_ATTEMPT="${RLVR_ATTEMPT:-$(date -u +%Y%m%dT%H%M%SZ)}"
# Inference-only baseline: 10 samples per problem with the frozen protocol; the one the PUBLIC
# tests rank best goes to outputs/samples, which the evaluations attached to this run score.
"$RLVR_PYTHON" -m engine.cli evaluate --run-dir "$RUN_DIR" --model /runs/golden/38b088b59681/model \
    --generate-only --backend "${RLVR_EVAL_BACKEND:-auto}"
