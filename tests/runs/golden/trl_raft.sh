#!/usr/bin/env bash
# rlvr-run raft run e36c8b221b55 (raft@1) of spec golden-trl.
# Rendered from templates/launch/trl_raft.sh.j2; edit the template, not this file.
# Everything it writes stays inside the run directory.
set -euo pipefail
# A Ray job without shared storage runs in its own copy of the run directory (RLVR_RUN_DIR).
RUN_DIR=${RLVR_RUN_DIR:-/runs/golden/e36c8b221b55}
cd "$RUN_DIR"
mkdir -p logs outputs
export RLVR_RUN_ID=e36c8b221b55
RLVR_PYTHON="${RLVR_PYTHON:-python3}"
# The executor sets one attempt id per try; a manual run gets a timestamp.
export RLVR_ATTEMPT="${RLVR_ATTEMPT:-$(date -u +%Y%m%dT%H%M%SZ)}"
# RAFT: per cycle, sample from the current model, judge, fine-tune on the accepted samples.
# Resumes from the last complete checkpoint of an earlier attempt; writes logs/metrics.<attempt>.jsonl,
# outputs/training.json, traces/ (RL kinds) and, at the end, model/ from the chosen checkpoint.
"$RLVR_PYTHON" -m engine.train.raft --run-dir "$RUN_DIR" --model /runs/golden/38d2c11ab134/model
