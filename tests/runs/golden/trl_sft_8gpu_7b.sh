#!/usr/bin/env bash
# rlvr-run sft run 38d2c11ab134 (sft@1) of spec golden-trl.
# Rendered from templates/launch/trl_sft.sh.j2; edit the template, not this file.
# Everything it writes stays inside the run directory.
set -euo pipefail
# A Ray job without shared storage runs in its own copy of the run directory (RLVR_RUN_DIR).
RUN_DIR=${RLVR_RUN_DIR:-/runs/golden/38d2c11ab134}
cd "$RUN_DIR"
mkdir -p logs outputs
export RLVR_RUN_ID=38d2c11ab134
RLVR_PYTHON="${RLVR_PYTHON:-python3}"
# The executor sets one attempt id per try; a manual run gets a timestamp.
export RLVR_ATTEMPT="${RLVR_ATTEMPT:-$(date -u +%Y%m%dT%H%M%SZ)}"
# Supervised fine-tuning with trl's SFTTrainer on the reference solutions of the train datasets
# (prompt/completion rows: the loss covers the answer only).
# Resumes from the last complete checkpoint of an earlier attempt; writes logs/metrics.<attempt>.jsonl,
# outputs/training.json, traces/ (RL kinds) and, at the end, model/ from the chosen checkpoint.
# 8 GPUs: one trainer process per GPU under accelerate, fsdp (7.6 B parameters: weights, gradients and optimizer state sharded over the GPUs).
# The run's CPUs (RLVR_CPUS) are shared among them; RLVR_ACCELERATE replaces the launcher (tests).
threads=$(( ${RLVR_CPUS:-8} / 8 ))
${RLVR_ACCELERATE:-"$RLVR_PYTHON" -m accelerate.commands.launch} --num_processes 8 --num_machines 1 --mixed_precision bf16 --main_process_port 36090 --use_fsdp --fsdp_version 1 --fsdp_sharding_strategy FULL_SHARD --fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP --fsdp_state_dict_type FULL_STATE_DICT --fsdp_use_orig_params true --fsdp_cpu_ram_efficient_loading true --fsdp_sync_module_states true \
    --num_cpu_threads_per_process "$(( threads > 0 ? threads : 1 ))" \
    --module engine.train.sft --run-dir "$RUN_DIR" --model Qwen/Qwen2.5-Coder-1.5B-Instruct
