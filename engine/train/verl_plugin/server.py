"""The `rlvr_hf` rollout's server: one Ray actor per replica holding a `transformers` copy of
the policy, answering verl's agent loop token-in, token-out.

verl's agent loop sends one `generate(prompt_ids, sampling_params, request_id)` per sample,
all at once. The server gathers the requests that arrive while it is busy and answers them
with one left-padded `generate` call per set of sampling parameters (`_Batcher`), so a step of
batch × n samples costs a few batched calls instead of batch × n single ones. Its weights are
the actor's, handed over at every sync (`update_weights`); with `RLVR_ROLLOUT_LOG` set, every
sync (its step and a digest of the weights) and every batch (its size and the weights it used)
is a JSON line there.
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

LOG_ENV = "RLVR_ROLLOUT_LOG"
GATHER_S = 0.02  # how long the batcher waits for more requests once the first arrives


def weights_digest(state: dict[str, torch.Tensor], skip: frozenset[str] = frozenset()) -> str:
    """sha256 of the tensors by name, as float32, tied copies (`skip`) left out: the same for the
    rollout's copy and the Hugging Face weights of verl's checkpoint of that step."""
    digest = hashlib.sha256()
    for name in sorted(set(state) - skip):
        digest.update(name.encode())
        digest.update(state[name].detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class _Sampling:
    """The parameters one batched `generate` call shares."""

    do_sample: bool
    temperature: float
    top_p: float
    top_k: Optional[int]
    repetition_penalty: float
    logprobs: bool
    max_new_tokens: int

    @classmethod
    def of(cls, params: dict[str, Any], config: RolloutConfig, max_new_tokens: int) -> "_Sampling":
        params = dict(params)
        temperature = float(params.pop("temperature", config.temperature))
        top_p = float(params.pop("top_p", config.top_p))
        top_k = int(params.pop("top_k", config.top_k))
        penalty = float(params.pop("repetition_penalty", config.repetition_penalty))
        logprobs = params.pop("logprobs", False)
        # Greedy: verl's validation sends temperature 0 (val_kwargs), or do_sample false.
        do_sample = bool(params.pop("do_sample", config.do_sample)) and temperature > 0
        params.pop("seed", None)
        if params:
            raise ValueError(f"the rlvr_hf rollout does not take sampling parameter(s) {sorted(params)}")
        sampling = cls(do_sample=do_sample, temperature=temperature if do_sample else 1.0,
                       top_p=top_p if do_sample else 1.0, top_k=top_k if do_sample and top_k > 0 else None,
                       repetition_penalty=penalty, logprobs=bool(logprobs), max_new_tokens=max_new_tokens)
        return sampling


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: _Sampling
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class HFServer:
    """The policy in `transformers`, one per replica (a Ray actor, many requests at once)."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int) -> None:
        self.config: RolloutConfig = omega_conf_to_dataclass(config)
        self.model_config: HFModelConfig = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.replica_rank = replica_rank
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model: Any = None
        self.pad_id = self.eos_ids = None
        self.version = 0  # weight syncs received
        self.queue: list[_Request] = []
        self.wakeup: Optional[asyncio.Event] = None
        self.log_path = os.environ.get(LOG_ENV)

    async def launch_server(self) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if self.device == "cpu":
            torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
        path = self.model_config.local_path
        self.model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32,
                                                          attn_implementation="sdpa").to(self.device).eval()
        tokenizer = AutoTokenizer.from_pretrained(path)
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos if eos is not None else tokenizer.eos_token_id])
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids)
        self.wakeup = asyncio.Event()
        asyncio.get_running_loop().create_task(self._serve())

    def get_server_address(self) -> tuple[str, int]:
        # verl's load balancer keys servers by "address:port": the replica rank makes it unique.
        return ray.util.get_node_ip_address().strip("[]"), self.replica_rank

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       image_data: Any = None, video_data: Any = None, **kwargs: Any) -> TokenOutput:
        if image_data is not None or video_data is not None:
            raise ValueError("the rlvr_hf rollout generates text only")
        budget = self.config.prompt_length + self.config.response_length - len(prompt_ids)
        max_new = max(1, min(self.config.response_length, budget))
        request = _Request(list(prompt_ids), _Sampling.of(sampling_params, self.config, max_new))
        self.queue.append(request)
        self.wakeup.set()
        token_ids, log_probs = await request.done
        return TokenOutput(token_ids=token_ids, log_probs=log_probs, stop_reason="completed",
                           extra_fields={"global_steps": self.version})

    async def _serve(self) -> None:
        while True:
            await self.wakeup.wait()
            await asyncio.sleep(GATHER_S)  # the agent loop fires its requests together: take them all
            self.wakeup.clear()
            pending, self.queue = self.queue, []
            groups: dict[_Sampling, list[_Request]] = {}
            for request in pending:
                groups.setdefault(request.sampling, []).append(request)
            for sampling, requests in groups.items():
                try:
                    results = await asyncio.to_thread(self._generate, sampling, [r.prompt_ids for r in requests])
                except Exception as exc:  # every waiting request learns why
                    for request in requests:
                        request.done.set_exception(exc)
                    continue
                for request, result in zip(requests, results):
                    request.done.set_result(result)

    @torch.no_grad()
    def _generate(self, sampling: _Sampling, prompts: list[list[int]]) -> list[tuple[list[int], Optional[list[float]]]]:
        started = time.perf_counter()
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts], device=self.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        out = self.model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=sampling.max_new_tokens, do_sample=sampling.do_sample,
            temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
            repetition_penalty=sampling.repetition_penalty, eos_token_id=sorted(self.eos_ids),
            pad_token_id=self.pad_id, return_dict_in_generate=True, output_logits=sampling.logprobs)
        new = out.sequences[:, width:].tolist()
        results = []
        for row, tokens in enumerate(new):
            end = next((i + 1 for i, t in enumerate(tokens) if t in self.eos_ids), len(tokens))
            log_probs = None
            if sampling.logprobs:
                logits = torch.stack([step[row] for step in out.logits[:end]]).float() / sampling.temperature
                log_probs = torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens[:end], device=logits.device)
                                                                  [:, None]).squeeze(1).tolist()
            results.append((tokens[:end], log_probs))
        self._log({"event": "batch", "version": self.version, "size": len(prompts),
                   "max_new_tokens": sampling.max_new_tokens, "greedy": not sampling.do_sample,
                   "seconds": round(time.perf_counter() - started, 4)})
        return results

    async def update_weights(self, state: dict[str, torch.Tensor], global_steps: Optional[int] = None) -> None:
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        tied = frozenset(getattr(self.model, "_tied_weights_keys", None) or ())
        if unexpected or set(missing) - tied:
            raise ValueError(f"the actor's weights do not fit the rollout's model: missing {sorted(missing)[:5]}, "
                             f"unexpected {sorted(unexpected)[:5]}")
        self.version += 1
        if self.log_path:
            self._log({"event": "sync", "version": self.version, "global_steps": global_steps,
                       "digest": weights_digest(self.model.state_dict(), tied)})

    def _log(self, row: dict[str, Any]) -> None:
        if self.log_path:
            with open(self.log_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")

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
        while self.queue:
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
