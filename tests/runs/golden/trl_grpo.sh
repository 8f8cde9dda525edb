#!/usr/bin/env bash
# rlvr-run grpo run 9587eb5ea469 (grpo@1) of spec golden-trl.
# Rendered from templates/launch/trl_grpo.sh.j2; edit the template, not this file.
# Everything it writes stays inside the run directory.
set -euo pipefail
# A Ray job without shared storage runs in its own copy of the run directory (RLVR_RUN_DIR).
RUN_DIR=${RLVR_RUN_DIR:-/runs/golden/9587eb5ea469}
cd "$RUN_DIR"
mkdir -p logs outputs
export RLVR_RUN_ID=9587eb5ea469
RLVR_PYTHON="${RLVR_PYTHON:-python3}"
# The executor sets one attempt id per try; a manual run gets a timestamp.
export RLVR_ATTEMPT="${RLVR_ATTEMPT:-$(date -u +%Y%m%dT%H%M%SZ)}"
# GRPO with trl's GRPOTrainer; the reward is the project's judge (sparse), the function verl calls.
# Resumes from the last complete checkpoint of an earlier attempt; writes logs/metrics.<attempt>.jsonl,
# outputs/training.json, traces/ (RL kinds) and, at the end, model/ from the chosen checkpoint.
"$RLVR_PYTHON" -m engine.train.grpo --run-dir "$RUN_DIR" --model /runs/golden/38d2c11ab134/model
