"""A reward call's settings: the mode, and the judge it scores with, the run's frozen `judge:`
(`run_config`) or, for a reward used on its own, reward_kwargs, the environment and the defaults
(see `engine.judge.reward`).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

from ruamel.yaml import YAML

from engine.judge.api import JudgeConfig
from engine.judge.config import protocol_tests
from engine.spec.model import JudgeSpec


Mode = Literal["dense", "sparse"]
Backend = Literal["local", "sandbox_fusion"]


# reward_kwargs that set the judge: with `run_config` they come from the run, never from here
JUDGE_KWARGS = ("backend", "url", "sandbox_fusion_url", "timeout_s", "memory_mb", "compare", "float_tol")


@dataclass(kw_only=True, frozen=True)
class RewardSettings:
    mode: Mode = "dense"  # dense: pass_ratio; sparse: 1[accepted] (stops at the first failing test)
    judge: JudgeSpec = field(default_factory=JudgeSpec)  # backend, url, limits, compare mode: the run's frozen `judge:`
    workers: Optional[int] = None  # judge workers in this process (default: all cores)
    wall_timeout_s: float = 300.0  # bound on one compute_score call
    most_demanding: Optional[int] = None  # the run's rollout protocol's `tests: {most_demanding: N}`

    @classmethod
    def resolve(cls, kwargs: Mapping[str, Any], extra_info: Optional[Mapping[str, Any]]) -> "RewardSettings":
        env = os.environ
        info = extra_info or {}
        mode = kwargs.get("mode") or info.get("reward_mode") or env.get("RLVR_REWARD_MODE") or "dense"
        if mode not in ("dense", "sparse"):
            raise ValueError(f"reward mode must be dense or sparse, got {mode!r}")
        most: Optional[int] = None
        if kwargs.get("run_config"):
            given = [k for k in JUDGE_KWARGS if kwargs.get(k) is not None]
            if given:
                raise ValueError(f"reward_kwargs {', '.join(given)} would override the run's frozen `judge:` "
                                 f"settings; set them in the spec's `judge:` block instead")
            judge = run_judge(str(kwargs["run_config"]))
            most = run_tests(str(kwargs["run_config"]), info.get("dataset"))
        else:
            backend = kwargs.get("backend") or env.get("RLVR_REWARD_BACKEND") or "local"
            if backend not in ("local", "sandbox_fusion"):
                raise ValueError(f"reward backend must be local or sandbox_fusion, got {backend!r}")
            url = kwargs.get("url") or kwargs.get("sandbox_fusion_url") or env.get("RLVR_SANDBOX_URL")
            judge = JudgeSpec.model_validate({"backend": backend, "url": url, **{
                k: kwargs[k] for k in ("timeout_s", "memory_mb", "compare", "float_tol") if kwargs.get(k) is not None}})
        return cls(
            mode=mode,
            judge=judge,
            workers=int(kwargs["workers"]) if kwargs.get("workers") else None,
            wall_timeout_s=float(kwargs.get("wall_timeout_s", cls.wall_timeout_s)),
            most_demanding=most,
        )

    def judge_config(self) -> JudgeConfig:
        return JudgeConfig.from_spec(self.judge, most_demanding=self.most_demanding,
                                     **({"workers": self.workers} if self.workers else {}))

    @property
    def key(self) -> tuple:
        """Equal for settings that judge alike (the judge spec is a model, not hashable itself)."""
        return (self.mode, self.judge.model_dump_json(), self.workers, self.wall_timeout_s, self.most_demanding)


@functools.lru_cache(maxsize=8)
def run_judge(config_path: str) -> JudgeSpec:
    """The frozen `judge:` block of a run's config.yaml (read once per process)."""
    data = YAML(typ="safe").load(Path(config_path).read_text(encoding="utf-8")) or {}
    return JudgeSpec.model_validate(data.get("judge") or {})


@functools.lru_cache(maxsize=32)
def run_tests(config_path: str, dataset: Optional[str] = None) -> Optional[int]:
    """The tests the reward judges a row of `dataset` on: its protocol's `tests: {most_demanding: N}`.
    verl scores its validation rows (the `select:` and `early_stop:` datasets) with this reward too:
    those are judged as the run's `select` protocol says, as trl's checkpoint scoring judges them;
    training rows as its `rollout` protocol says."""
    data = YAML(typ="safe").load(Path(config_path).read_text(encoding="utf-8")) or {}
    protocols = data.get("protocols") or {}
    uses = set(((data.get("datasets") or {}).get(dataset) or {}).get("uses") or [])
    use = "select" if "select" in protocols and uses & {"select", "early_stop"} and "train" not in uses else "rollout"
    return protocol_tests(protocols.get(use))
