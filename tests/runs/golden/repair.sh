#!/usr/bin/env bash
# rlvr-run repair run 07b6307b7376 (repair@1) of spec golden.
# Rendered from templates/launch/verl_repair.sh.j2; edit the template, not this file.
# Everything it writes stays inside the run directory.
set -euo pipefail
# A Ray job without shared storage runs in its own copy of the run directory (RLVR_RUN_DIR).
RUN_DIR=${RLVR_RUN_DIR:-/runs/golden/07b6307b7376}
cd "$RUN_DIR"
mkdir -p logs outputs
export RLVR_RUN_ID=07b6307b7376
RLVR_PYTHON="${RLVR_PYTHON:-python3}"
# The executor sets one attempt id per try; a manual run gets a timestamp.
export RLVR_ATTEMPT="${RLVR_ATTEMPT:-$(date -u +%Y%m%dT%H%M%SZ)}"
# Writes data/*.parquet from the frozen config's datasets (python -m engine.train.export).
"$RLVR_PYTHON" -m engine.train.export --run-dir "$RUN_DIR" --format verl-rl --model /runs/golden/c02b4fb0c3a0/model
# Multi-round repair = GRPO whose rollouts run the rlvr_repair agent loop: answer, judge,
# feed the verdict back, up to 2 rounds.
# verl imports the modules named here in each of its processes (its plug-in hook): the repair
# agent loop, and on a machine without a GPU rlvr-run's CPU platform and transformers rollout.
export VERL_USE_EXTERNAL_MODULES=engine.train.verl_plugin,engine.train.verl_repair_loop
# The transformers rollout's record of its weight syncs and batches (vLLM ignores it).
export RLVR_ROLLOUT_LOG="$RUN_DIR/logs/rollout.${RLVR_ATTEMPT}.jsonl"
export VERL_FILE_LOGGER_PATH="$RUN_DIR/logs/metrics.${RLVR_ATTEMPT}.jsonl"
# A silent hang (verl's start-up can) fails the attempt after 72.0 h instead of holding the GPUs.
# verl has no early stopping: engine.train.verl_watch stops it by the phase's early_stop rules
# and fails it when a step's rewards are judge faults.
"$RLVR_PYTHON" -m engine.train.verl_watch --run-dir "$RUN_DIR" -- \
timeout --kill-after=120 259200 "$RLVR_PYTHON" -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    algorithm.use_kl_in_reward=false \
    data.train_files=/runs/golden/07b6307b7376/data/train.parquet \
    data.val_files=/runs/golden/07b6307b7376/data/train.parquet \
    data.filter_overlong_prompts=true \
    data.truncation=error \
    actor_rollout_ref.model.path=/runs/golden/c02b4fb0c3a0/model \
    actor_rollout_ref.actor.strategy=fsdp2 \
    actor_rollout_ref.actor.use_kl_loss=true \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.optim.lr=1e-06 \
    data.train_batch_size=64 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2 \
    data.max_prompt_length=1024 \
    data.max_response_length=1024 \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.entropy_coeff=0 \
    trainer.total_epochs=1 \
    trainer.save_freq=50 \
    trainer.test_freq=-1 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.name=rlvr_hf \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.top_p=1.0 \
    actor_rollout_ref.rollout.top_k=-1 \
    actor_rollout_ref.rollout.val_kwargs.n=1 \
    actor_rollout_ref.rollout.val_kwargs.temperature=0 \
    actor_rollout_ref.rollout.val_kwargs.do_sample=false \
    reward.custom_reward_function.path=/opt/rlvr-run/engine/reward.py \
    reward.custom_reward_function.name=compute_score \
    reward.reward_manager.source=importlib \
    reward.reward_manager.name=RewardManager \
    reward.reward_manager.module.path=pkg://engine.train.verl_reward_manager \
    +reward.custom_reward_function.reward_kwargs.mode=dense \
    +reward.custom_reward_function.reward_kwargs.run_config=/runs/golden/07b6307b7376/config.yaml \
    trainer.val_before_train=false \
    +actor_rollout_ref.model.override_config.attn_implementation=sdpa \
    'actor_rollout_ref.actor.checkpoint.save_contents=["model","optimizer","extra","hf_model"]' \
    'trainer.logger=["console","file"]' \
    trainer.project_name=golden \
    trainer.experiment_name=07b6307b7376 \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.default_local_dir=/runs/golden/07b6307b7376/checkpoints \
    trainer.resume_mode=auto \
    trainer.rollout_data_dir=/runs/golden/07b6307b7376/traces/verl_rollouts \
    actor_rollout_ref.rollout.agent.default_agent_loop=rlvr_repair \
    actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2
# The checkpoint children load: the best validated saved step (else the last), merged to model/ (HF).
step="$("$RLVR_PYTHON" -m engine.train.verl_finish --run-dir "$RUN_DIR")"
"$RLVR_PYTHON" -m verl.model_merger merge --backend fsdp \
    --local_dir "checkpoints/global_step_${step}/actor" --target_dir model
# The model's key: every file's sha256, hashed once here and read by every evaluation of it.
"$RLVR_PYTHON" -m engine.evaluate.model_key model >/dev/null
