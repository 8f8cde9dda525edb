#!/usr/bin/env bash
# rlvr-run dpo run cf82c112ae8e (dpo@1) of spec golden.
# Rendered from templates/launch/dpo.sh.j2; edit the template, not this file.
# Everything it writes stays inside the run directory.
set -euo pipefail
RUN_DIR=/runs/golden/cf82c112ae8e
cd "$RUN_DIR"
mkdir -p logs outputs
export RLVR_RUN_ID=cf82c112ae8e
RLVR_PYTHON="${RLVR_PYTHON:-python3}"
# The executor sets one attempt id per try; a manual run gets a timestamp.
export RLVR_ATTEMPT="${RLVR_ATTEMPT:-$(date -u +%Y%m%dT%H%M%SZ)}"
# Offline DPO with TRL's DPOTrainer (verl ships none): preference pairs from the parent
# model's judged samples on the pairs_from dataset, then training; the model goes to model/.
"$RLVR_PYTHON" -m engine.trainers.trl_dpo --config config.yaml \
    --model /runs/golden/20a5cdf2715a/model --output-dir model \
    --log-file "logs/metrics.${RLVR_ATTEMPT}.jsonl"
