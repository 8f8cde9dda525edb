#!/usr/bin/env bash
# rlvr-run sft run 38b088b59681 (sft@1) of spec golden.
# Rendered from templates/launch/verl_sft.sh.j2; edit the template, not this file.
# Everything it writes stays inside the run directory.
set -euo pipefail
# A Ray job without shared storage runs in its own copy of the run directory (RLVR_RUN_DIR).
RUN_DIR=${RLVR_RUN_DIR:-/runs/golden/38b088b59681}
cd "$RUN_DIR"
mkdir -p logs outputs
export RLVR_RUN_ID=38b088b59681
RLVR_PYTHON="${RLVR_PYTHON:-python3}"
# The executor sets one attempt id per try; a manual run gets a timestamp.
export RLVR_ATTEMPT="${RLVR_ATTEMPT:-$(date -u +%Y%m%dT%H%M%SZ)}"
# Writes data/*.parquet from the frozen config's datasets (python -m engine.train.export).
"$RLVR_PYTHON" -m engine.train.export --run-dir "$RUN_DIR" --format verl-sft-messages --model Qwen/Qwen2.5-Coder-1.5B-Instruct
# verl imports the modules named here in each of its processes (its plug-in hook): the repair
# agent loop, and on a machine without a GPU rlvr-run's CPU platform and transformers rollout.
export VERL_USE_EXTERNAL_MODULES=engine.train.verl_plugin
# The transformers rollout's record of its weight syncs and batches (vLLM ignores it).
export RLVR_ROLLOUT_LOG="$RUN_DIR/logs/rollout.${RLVR_ATTEMPT}.jsonl"
export VERL_FILE_LOGGER_PATH="$RUN_DIR/logs/metrics.${RLVR_ATTEMPT}.jsonl"
# A silent hang (verl's start-up can) fails the attempt after 72.0 h instead of holding the GPUs.
timeout --kill-after=120 259200 "$RLVR_PYTHON" -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node=1 -m verl.trainer.sft_trainer \
    data.train_files=/runs/golden/38b088b59681/data/sft_train.parquet \
    data.val_files=/runs/golden/38b088b59681/data/sft_valid.parquet \
    data.messages_key=messages \
    model.path=Qwen/Qwen2.5-Coder-1.5B-Instruct \
    +model.override_config.attn_implementation=sdpa \
    engine.strategy=fsdp2 \
    'checkpoint.save_contents=["model","optimizer","extra","hf_model"]' \
    optim.lr=2e-05 \
    data.train_batch_size=64 \
    data.micro_batch_size_per_gpu=2 \
    data.max_length=2048 \
    trainer.total_epochs=1 \
    'trainer.logger=["console","file"]' \
    trainer.project_name=golden \
    trainer.experiment_name=38b088b59681 \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.default_local_dir=/runs/golden/38b088b59681/checkpoints \
    trainer.resume_mode=auto \
    hydra.run.dir=logs/hydra
# The checkpoint children load: the best validated saved step (else the last), merged to model/ (HF).
step="$("$RLVR_PYTHON" -m engine.train.verl_finish --run-dir "$RUN_DIR")"
"$RLVR_PYTHON" -m verl.model_merger merge --backend fsdp \
    --local_dir "checkpoints/global_step_${step}" --target_dir model
# The model's key: every file's sha256, hashed once here and read by every evaluation of it.
"$RLVR_PYTHON" -m engine.evaluate.model_key model >/dev/null
