"""The `rlvr_hf` rollout's server: one Ray actor per replica holding a `transformers` copy of
the policy, answering verl's agent loop token-in, token-out.

verl's agent loop sends one `generate(prompt_ids, sampling_params, request_id)` per sample,
all at once. The server gathers the requests that arrive while it is busy and answers them
with one left-padded `generate` call per set of sampling parameters (`_Batcher`), so a step of
batch × n samples costs a few batched calls instead of batch × n single ones. Its weights are
the actor's, handed over at every sync (`update_weights`); with `RLVR_ROLLOUT_LOG` set, every
sync (its step and a digest of the weights) and every batch (its size and the weights it used)
is a JSON line there.

What it returns matches verl's vLLM server for the same request: the model's own
`generation_config.json` is set aside (only the request's parameters sample), `top_k` <= 0 is
off, temperature 0 is greedy, EOS is the tokenizer's and the generation config's, tokens after it
are dropped, and log-probs follow `rollout.logprobs_mode` as vLLM's do: `processed_logprobs`
(verl's default) are the log-probs of the chosen token under the distribution it was sampled
from (after repetition penalty, temperature, top-k and top-p); `raw_logprobs` those of the
model's logits. verl's rollout correction (TIS) compares them with the actor's.

A sampled answer depends on its request alone, never on which requests shared its batch (which
is down to arrival timing): each row draws from its own generator, seeded by the rollout's seed
(a request's own `seed` first, as vLLM's), the weights' step, the prompt's tokens and how many
requests of that prompt the step has seen before it (the n samples of a prompt are n draws). Not
the request id: verl's v1 trainer hands a step's prompts to the agent loop in an order that
varies between runs, and under `rollout.full_determinism` the ids are positions (`det-<i>`), so
keyed by id the same prompt would draw other tokens in another run. The replica's rank is in the
seed too: verl's load balancer spreads a prompt's n requests over the replicas, each counting on
its own, and without it their first draws would be one draw (a group of copies has no advantage).
So a rerun draws the same with one replica (the CPU default); with several, which replica gets
which request is verl's random choice.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import ray
import torch
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import HFModelConfig, RolloutConfig
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from engine.train.verl_plugin.adapter import SERVER_NAME
from engine.train.verl_plugin.sampling import _RowSampler, _Sampling, prompt_key, row_seed

LOG_ENV = "RLVR_ROLLOUT_LOG"
GATHER_S = 0.02  # how long the batcher waits for more requests once the first arrives
LOGPROBS_MODES = ("processed_logprobs", "raw_logprobs")


def weights_digest(state: dict[str, torch.Tensor], skip: frozenset[str] = frozenset()) -> str:
    """sha256 of the tensors by name, as float32, tied copies (`skip`) left out: the same for the
    rollout's copy and the Hugging Face weights of verl's checkpoint of that step."""
    digest = hashlib.sha256()
    for name in sorted(set(state) - skip):
        digest.update(name.encode())
        digest.update(state[name].detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: _Sampling
    seed: int = 0  # of this request's generator (`row_seed`)
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class HFServer:
    """The policy in `transformers`, one per replica (a Ray actor, many requests at once)."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int) -> None:
        self.config: RolloutConfig = omega_conf_to_dataclass(config)
        self.model_config: HFModelConfig = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        if (self.config.logprobs_mode or LOGPROBS_MODES[0]) not in LOGPROBS_MODES:
            raise ValueError(f"the rlvr_hf rollout returns {' or '.join(LOGPROBS_MODES)}, not "
                             f"actor_rollout_ref.rollout.logprobs_mode={self.config.logprobs_mode!r}")
        self.replica_rank = replica_rank
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model: Any = None
        self.pad_id = self.eos_ids = None
        self.version = 0  # weight syncs received
        self.global_steps: Optional[int] = None  # verl's step of the weights, as vLLM's server reports it
        self.queue: list[_Request] = []
        self.busy = 0  # requests taken from the queue and not yet answered
        self.failure: Optional[BaseException] = None
        self.wakeup: Optional[asyncio.Event] = None
        self.weights: Optional[asyncio.Lock] = None  # a sync never lands in the middle of a batch
        self.log_path = os.environ.get(LOG_ENV)
        self.seen: dict[str, int] = {}  # requests of each prompt since the step was set (`row_seed`)

    async def launch_server(self) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        if self.device == "cpu":
            torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
        path = self.model_config.local_path
        self.model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32,
                                                          attn_implementation="sdpa").to(self.device).eval()
        tokenizer = AutoTokenizer.from_pretrained(path)
        # vLLM stops on the tokenizer's EOS and on the generation config's.
        eos = self.model.generation_config.eos_token_id
        eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        self.eos_ids = eos | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set())
        if not self.eos_ids:
            raise ValueError(f"the model at {path} names no EOS token: the rollout could not stop")
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids)
        # The model's shipped sampling defaults (a top_k, a min_new_tokens...) would fill what a
        # request leaves unset: a neutral config leaves only the request's parameters.
        self.model.generation_config = GenerationConfig(eos_token_id=sorted(self.eos_ids), pad_token_id=self.pad_id)
        self.wakeup, self.weights = asyncio.Event(), asyncio.Lock()
        task = asyncio.get_running_loop().create_task(self._serve())
        task.add_done_callback(self._served)

    def _served(self, task: asyncio.Task) -> None:
        # The batcher never returns: if it stopped, every waiting and later request fails.
        self.failure = (None if task.cancelled() else task.exception()) or RuntimeError("the batcher stopped")
        for request in self.queue:
            if not request.done.done():
                request.done.set_exception(self.failure)

    def get_server_address(self) -> tuple[str, int]:
        # verl's load balancer keys servers by "address:port": the replica rank makes it unique.
        return ray.util.get_node_ip_address().strip("[]"), self.replica_rank

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       image_data: Any = None, video_data: Any = None, **kwargs: Any) -> TokenOutput:
        if image_data is not None or video_data is not None:
            raise ValueError("the rlvr_hf rollout generates text only")
        if self.failure is not None:
            raise RuntimeError("the rlvr_hf rollout's batcher failed") from self.failure
        budget = self.config.prompt_length + self.config.response_length - len(prompt_ids)
        max_new = max(1, min(self.config.response_length, budget))
        sampling = _Sampling.of(sampling_params, self.config, max_new, len(prompt_ids))
        key = prompt_key(list(prompt_ids))
        occurrence = self.seen.get(key, 0)
        self.seen[key] = occurrence + 1
        base = sampling_params.get("seed")
        seed = row_seed(self.config.seed if base is None else int(base), self.replica_rank, self.global_steps, key,
                        occurrence)
        request = _Request(list(prompt_ids), sampling, seed=seed)
        self.queue.append(request)
        self.wakeup.set()
        token_ids, log_probs, global_steps = await request.done
        return TokenOutput(token_ids=token_ids, log_probs=log_probs, stop_reason="completed",
                           extra_fields={"global_steps": global_steps})

    async def _serve(self) -> None:
        while True:
            await self.wakeup.wait()
            await asyncio.sleep(GATHER_S)  # the agent loop fires its requests together: take them all
            self.wakeup.clear()
            pending, self.queue = self.queue, []
            self.busy += len(pending)
            groups: dict[_Sampling, list[_Request]] = {}
            for request in pending:
                groups.setdefault(request.sampling, []).append(request)
            try:
                for sampling, requests in groups.items():
                    await self._answer(sampling, requests)
            except BaseException as exc:  # the batcher itself broke: no taken request waits forever
                for request in pending:
                    if not request.done.done():
                        request.done.set_exception(exc)
                raise
            finally:
                self.busy -= len(pending)

    async def _answer(self, sampling: _Sampling, requests: list["_Request"]) -> None:
        try:
            async with self.weights:
                steps = self.global_steps
                results: list[Any] = await asyncio.to_thread(self._generate, sampling, [r.prompt_ids for r in requests],
                                                             [r.seed for r in requests])
        except Exception as exc:  # every waiting request learns why
            results = [exc] * len(requests)
        for request, result in zip(requests, results):
            if request.done.done():  # its caller went away (cancelled)
                continue
            if isinstance(result, Exception):
                request.done.set_exception(result)
            else:
                request.done.set_result((*result, steps))

    @torch.no_grad()
    def _generate(self, sampling: _Sampling, prompts: list[list[int]],
                  seeds: list[int]) -> list[tuple[list[int], Optional[list[float]]]]:
        from transformers import LogitsProcessorList

        started = time.perf_counter()
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts], device=self.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        processed = (self.config.logprobs_mode or LOGPROBS_MODES[0]) == "processed_logprobs"
        sampler = (_RowSampler(sampling, seeds, self.device, keep=sampling.logprobs and processed)
                   if sampling.do_sample else None)
        # Sampling is the sampler's (after the repetition penalty, which transformers applies
        # to greedy decoding too): `generate` itself only takes the argmax.
        out = self.model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=sampling.max_new_tokens, do_sample=False,
            logits_processor=LogitsProcessorList([sampler] if sampler else []),
            repetition_penalty=sampling.repetition_penalty, eos_token_id=sorted(self.eos_ids),
            pad_token_id=self.pad_id, return_dict_in_generate=True,
            output_scores=sampling.logprobs and processed and sampler is None,
            output_logits=sampling.logprobs and not processed)
        new = out.sequences[:, width:].tolist()
        steps = (sampler.log_probs if sampler else out.scores) if processed else out.logits
        results = []
        for row, tokens in enumerate(new):
            end = next((i + 1 for i, t in enumerate(tokens) if t in self.eos_ids), len(tokens))
            log_probs = None
            if sampling.logprobs:
                scores = torch.stack([step[row] for step in steps[:end]]).float()
                chosen = torch.tensor(tokens[:end], device=scores.device)[:, None]
                log_probs = torch.log_softmax(scores, -1).gather(1, chosen).squeeze(1).tolist()
            results.append((tokens[:end], log_probs))
        self._log({"event": "batch", "version": self.version, "size": len(prompts),
                   "max_new_tokens": sampling.max_new_tokens, "greedy": not sampling.do_sample,
                   "seconds": round(time.perf_counter() - started, 4)})
        return results

    def _tied(self) -> dict[str, frozenset[str]]:
        """Each parameter's name -> the names sharing its storage (tied embeddings, when tied)."""
        names: dict[int, set[str]] = {}
        for name, tensor in self.model.state_dict(keep_vars=True).items():
            names.setdefault(tensor.data_ptr(), set()).add(name)
        return {name: frozenset(group) for group in names.values() for name in group}

    async def update_weights(self, state: dict[str, torch.Tensor], global_steps: Optional[int] = None) -> None:
        # Checked whole before a tensor is copied: a sync that does not fit fails and leaves the
        # weights as they were, never half the actor's.
        own = self.model.state_dict()
        tied = self._tied()
        missing = sorted(name for name in own if not tied[name] & state.keys())
        unexpected = sorted(set(state) - set(own))
        misshapen = sorted(name for name in set(state) & set(own) if tuple(state[name].shape) != tuple(own[name].shape))
        if missing or unexpected or misshapen:
            raise ValueError(f"the actor's weights do not fit the rollout's model: missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]}, other shapes {misshapen[:5]}")
        async with self.weights:
            self.model.load_state_dict(state, strict=False)
            self.version += 1
            if global_steps is not None:
                self._set_step(global_steps)
        if self.log_path:
            # The copies transformers ties and leaves out of a saved checkpoint, when tied here.
            declared = getattr(self.model, "_tied_weights_keys", None) or ()
            skip = frozenset(name for name in declared if len(tied.get(name, ())) > 1)
            self._log({"event": "sync", "version": self.version, "global_steps": global_steps,
                       "digest": weights_digest(self.model.state_dict(), skip)})

    def _log(self, row: dict[str, Any]) -> None:
        if self.log_path:
            with open(self.log_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")

    async def set_global_steps(self, global_steps: int) -> None:
        self._set_step(global_steps)

    def _set_step(self, global_steps: int) -> None:
        # The count starts again with a new step only: verl re-syncs the same step's weights after
        # a validation batch in some set-ups, and a restarted count would redraw its samples.
        if global_steps != self.global_steps:
            self.seen = {}
        self.global_steps = global_steps

    # verl's control calls: the copy stays in memory and requests are never aborted.
    async def wake_up(self, tags: Optional[list[str]] = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        while self.queue or self.busy:
            await asyncio.sleep(GATHER_S)

    async def abort_all_requests(self, reject_request: bool = False, **kwargs: Any) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self) -> None:
        return None

    async def abort_request(self, request_id: str, **kwargs: Any) -> dict[str, Any]:
        return {"aborted": False, "request_id": request_id}

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


class HFReplica(RolloutReplica):
    """One `HFServer` per replica, beside its first worker."""

    async def launch_servers(self) -> None:
        node_id = await self.workers[0].__ray_call__.remote(lambda _self: ray.get_runtime_context().get_node_id())
        server = ray.remote(HFServer).options(
            name=SERVER_NAME.format(replica=self.replica_rank), num_cpus=0, max_concurrency=self.max_concurrency,
            scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node_id=node_id,
                                                                                               soft=False),
        ).remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        self.servers = [server]
        await server.launch_server.remote()
        address, port = await server.get_server_address.remote()
        self._server_handle, self._server_address = server, f"{address}:{port}"
