#!/usr/bin/env bash
# rlvr-run dpo run 3381c466b968 (dpo@1) of spec golden.
# Rendered from templates/launch/trl_dpo.sh.j2; edit the template, not this file.
# Everything it writes stays inside the run directory.
set -euo pipefail
# A Ray job without shared storage runs in its own copy of the run directory (RLVR_RUN_DIR).
RUN_DIR=${RLVR_RUN_DIR:-/runs/golden/3381c466b968}
cd "$RUN_DIR"
mkdir -p logs outputs
export RLVR_RUN_ID=3381c466b968
RLVR_PYTHON="${RLVR_PYTHON:-python3}"
# The executor sets one attempt id per try; a manual run gets a timestamp.
export RLVR_ATTEMPT="${RLVR_ATTEMPT:-$(date -u +%Y%m%dT%H%M%SZ)}"
# Offline DPO with trl's DPOTrainer (verl ships none): K samples per pairs_from problem from the
# starting model, judged; pairs (chosen: highest pass ratio, rejected: lowest) and their quality
# report go to data/, then training.
# Resumes from the last complete checkpoint of an earlier attempt; writes logs/metrics.<attempt>.jsonl,
# outputs/training.json, traces/ (RL kinds) and, at the end, model/ from the chosen checkpoint.
"$RLVR_PYTHON" -m engine.train.dpo --run-dir "$RUN_DIR" --model /runs/golden/38b088b59681/model
