#!/usr/bin/env bash
# rlvr-run eval run e29d9f32c9b2 (base:every_phase) of spec golden.
# Rendered from templates/launch/eval.sh.j2; edit the template, not this file.
# Everything it writes stays inside the run directory.
set -euo pipefail
# A Ray job without shared storage runs in its own copy of the run directory (RLVR_RUN_DIR).
RUN_DIR=${RLVR_RUN_DIR:-/runs/golden/e29d9f32c9b2}
cd "$RUN_DIR"
mkdir -p logs outputs
export RLVR_RUN_ID=e29d9f32c9b2
RLVR_PYTHON="${RLVR_PYTHON:-python3}"
# The executor sets one attempt id per try; a manual run gets a timestamp.
export RLVR_ATTEMPT="${RLVR_ATTEMPT:-$(date -u +%Y%m%dT%H%M%SZ)}"
# Generates with the frozen protocol, judges every sample, writes outputs/metrics.json.
# A re-run resumes: only missing samples are generated, only unjudged ones judged.
# The executor may hand this process other evaluations of the same model that are ready now
# (RLVR_EVAL_ALSO, one run directory a line): the model is then loaded once for all of them.
also=()
while IFS= read -r dir; do
  if [ -n "$dir" ]; then also+=(--run-dir "$dir"); fi
done <<< "${RLVR_EVAL_ALSO:-}"
"$RLVR_PYTHON" -m engine.cli evaluate --run-dir "$RUN_DIR" ${also[@]+"${also[@]}"} \
    --model Qwen/Qwen2.5-Coder-1.5B-Instruct --backend "${RLVR_EVAL_BACKEND:-auto}"
