#!/usr/bin/env bash
# rlvr-run repair run 30fa4888d52e (repair@1) of spec golden-trl.
# Rendered from templates/launch/trl_repair.sh.j2; edit the template, not this file.
# Everything it writes stays inside the run directory.
set -euo pipefail
# A Ray job without shared storage runs in its own copy of the run directory (RLVR_RUN_DIR).
RUN_DIR=${RLVR_RUN_DIR:-/runs/golden/30fa4888d52e}
cd "$RUN_DIR"
mkdir -p logs outputs
export RLVR_RUN_ID=30fa4888d52e
RLVR_PYTHON="${RLVR_PYTHON:-python3}"
# The executor sets one attempt id per try; a manual run gets a timestamp.
export RLVR_ATTEMPT="${RLVR_ATTEMPT:-$(date -u +%Y%m%dT%H%M%SZ)}"
# Multi-round repair: GRPO whose rollouts answer, get public-test feedback and answer again, up to
# 3 rounds (the loop evaluation's repair uses); feedback tokens are kept out of the loss.
# Resumes from the last complete checkpoint of an earlier attempt; writes logs/metrics.<attempt>.jsonl,
# outputs/training.json, traces/ (RL kinds) and, at the end, model/ from the chosen checkpoint.
"$RLVR_PYTHON" -m engine.train.repair --run-dir "$RUN_DIR" --model /runs/golden/9587eb5ea469/model
