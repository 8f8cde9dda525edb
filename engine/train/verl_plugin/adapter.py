"""The worker side of the `rlvr_hf` rollout: verl's `BaseRollout` in each FSDP worker, a
client of the replica's server actor (`engine.train.verl_plugin.server`).

verl calls it around every weight sync (`resume(["weights"])`, `update_weights(...)`,
`resume(["kv_cache"])`, `release()`). The server keeps its own copy of the policy, so a sync
is the actor's full tensors handed over as one state dict; the first rank of each replica
sends, the others have the same tensors (FSDP gathers them on every rank).
"""

from __future__ import annotations

import os
from typing import Any, Generator

import ray
import torch
from verl.workers.rollout.base import BaseRollout

SERVER_NAME = "rlvr_hf_server_{replica}"


class ServerAdapter(BaseRollout):
    def __init__(self, config: Any, model_config: Any, device_mesh: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, model_config, device_mesh)
        world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                 * self.config.pipeline_model_parallel_size)
        rank = int(os.environ.get("RANK", "0"))
        self.replica_rank, self.rollout_rank = divmod(rank, world)
        self._server: Any = None

    def _handle(self) -> Any:
        # The server starts after the workers: looked up on first use.
        if self._server is None:
            self._server = ray.get_actor(SERVER_NAME.format(replica=self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None  # the server's copy never leaves memory

    async def release(self) -> None:
        return None

    @torch.no_grad()
    async def update_weights(self, weights: Generator[tuple[str, torch.Tensor], None, None],
                             wire_format: str = "named_tensors", **kwargs: Any) -> None:
        if wire_format != "named_tensors":
            raise ValueError(f"the rlvr_hf rollout takes full named tensors, not {wire_format!r} "
                             "(set actor_rollout_ref.rollout.checkpoint_engine.backend=naive)")
        state = {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights}
        if self.rollout_rank == 0:
            await self._handle().update_weights.remote(state, kwargs.get("global_steps"))

    def generate_sequences(self, prompts: Any) -> Any:
        raise NotImplementedError("the rlvr_hf rollout serves verl's agent loop (async server mode) only")
