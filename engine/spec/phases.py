"""The spec of a phase and of a variant overriding it: its training settings, resources and endpoint."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from engine.spec.base import SPEC_ADVICE, Scalar, StrictModel
from engine.spec.kinds import PhaseKind


class Resources(StrictModel):
    gpus: int = Field(default=0, ge=0)
    cpus: int = Field(default=1, ge=1)
    # Wall-clock bound of one attempt: a trainer that hangs silently (verl's TransferQueue
    # start-up can) fails instead of holding its GPUs forever. verl runs default to 72 h.
    time_limit_h: Optional[float] = Field(default=None, gt=0)
    # Memory a scheduler reserves for one attempt (Slurm's --mem); the local and Ray executors ignore it.
    memory_gb: Optional[float] = Field(default=None, gt=0)


class EndpointSpec(StrictModel):
    """A model served elsewhere (a vLLM or SGLang server of your own, a hosted API), evaluated by an
    eval phase through its OpenAI-compatible API. The key stays in the environment: the spec names
    the variable, and neither the spec, config.yaml nor any log holds its value."""

    base_url: str  # e.g. http://gpu-node:8000/v1
    model: str = Field(min_length=1)  # the served model's name, as the server knows it
    api_key_env: Optional[str] = None  # the environment variable holding the key
    concurrency: int = Field(default=32, ge=1, le=4096)  # requests in flight (a sliding window)
    # The served model's fingerprint (its greedy answers to fixed probe prompts, hashed: the error
    # of a mismatch and every record name it): pinned, an evaluation refuses a server serving other
    # weights under this name. The base_url is where, not what: it is not part of the run's id.
    # Or the weights' identity as the user states it, which no drift of greedy output moves:
    # `revision:<sha>` (checked against what the server lists) or `sha256:<hash of the weight files>`.
    fingerprint: Optional[str] = Field(default=None, pattern=r"^([0-9a-f]{16}|revision:[\w./-]+|sha256:[0-9a-f]{16,64})$")
    api_key: Optional[str] = None  # refused: only here to say where a key belongs

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")) or any(c.isspace() for c in value):
            raise PydanticCustomError(SPEC_ADVICE, "the endpoint's base_url must be an http(s) URL",
                                      {"fix": "write the API's root, e.g. http://gpu-node:8000/v1"})
        if "@" in value.split("://", 1)[1].split("/", 1)[0]:
            # the URL is the run's identity: it is copied into config.yaml, every record and the logs
            raise PydanticCustomError(SPEC_ADVICE, "the endpoint's base_url holds credentials (user:secret@host), "
                                      "which would be copied into every run's config.yaml and records",
                                      {"fix": "drop them from the URL and name the key's variable instead: "
                                              "`api_key_env: OPENAI_API_KEY`"})
        return value

    @field_validator("api_key_env")
    @classmethod
    def _variable(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise PydanticCustomError(SPEC_ADVICE, "api_key_env names an environment variable, and '{name}' cannot be one",
                                      {"name": value, "fix": "use letters, digits and '_', e.g. OPENAI_API_KEY"})
        return value

    @field_validator("api_key")
    @classmethod
    def _no_key_in_the_spec(cls, value: Optional[str]) -> Optional[str]:
        if value is not None:
            raise PydanticCustomError(SPEC_ADVICE, "an API key never goes in the spec: it would be copied into "
                                      "every run's config.yaml", {"fix": "export the key and name its variable "
                                                                  "instead: `api_key_env: OPENAI_API_KEY`"})
        return value


class PairsSpec(StrictModel):
    """Preference pairs from judged samples (engine.train.pairs)."""

    k: int = Field(default=8, ge=2)  # samples drawn and judged per problem
    min_delta: float = Field(default=0.3, gt=0, le=1)  # keep a pair when chosen − rejected pass_ratio ≥ this


# What the flywheel can harvest: a failing sample's class is its judge verdict, or `truncated` when
# generation hit the token limit (the cause, whatever the judge then made of the cut-off code).
ERROR_CLASSES = ("WRONG_ANSWER", "RUNTIME_ERROR", "SYNTAX_ERROR", "TIMEOUT", "MEMORY_LIMIT", "OUTPUT_LIMIT",
                 "NO_CODE", "truncated")
ErrorClass = Literal["WRONG_ANSWER", "RUNTIME_ERROR", "SYNTAX_ERROR", "TIMEOUT", "MEMORY_LIMIT", "OUTPUT_LIMIT",
                     "NO_CODE", "truncated"]


class FailuresSpec(StrictModel):
    """dpo `pairs_from:` as hard negatives: the failures of another run's policy on its training
    problems (engine.train.flywheel). `of` names the phase or variant whose judged training samples
    are harvested (GRPO / repair rollout traces, DPO / RAFT samples); `on`, a harvest pass of its
    model over this train dataset instead."""

    failures: list[ErrorClass] = Field(min_length=1)
    of: str
    on: Optional[str] = None
    # where the accepted answer of a pair comes from, in order: an accepted sample of the same problem
    # in the harvest, or the dataset's reference solution (judged first)
    chosen: list[Literal["harvest", "reference"]] = Field(default=["harvest"], min_length=1)


class RepairMixSpec(StrictModel):
    """sft `mix:` of format-repair rows: a failing answer of `repair_of`'s policy on a training
    problem, its public-test feedback, and the corrected answer the repair loop obtained from that
    policy; they make up `share` of the phase's training rows."""

    repair_of: str
    classes: list[ErrorClass] = Field(min_length=1)
    share: float = Field(gt=0, lt=1)
    # where the corrected answer comes from, in order: the repair loop (the harvested policy asked
    # again with the public-test feedback), or the problem's reference solution (judged first)
    corrected: list[Literal["repair", "reference"]] = Field(default=["repair"], min_length=1)


class EarlyStopSpec(StrictModel):
    """When training stops before its last step (the metric comes from `early_stop_on`)."""

    patience: int = Field(default=3, ge=1)  # evaluations without improvement before stopping
    min_delta: float = Field(default=0.0, ge=0)  # smaller gains count as no improvement
    # Stop when more than this share of one step's rollouts are TIMEOUT verdicts (a policy
    # learning to hang the judge); absent: never.
    timeout_rate: Optional[float] = Field(default=None, gt=0, le=1)


class PhaseFields(StrictModel):
    """Fields a phase declares and a variant may override."""

    from_: Optional[str] = Field(default=None, alias="from")
    trainer: Optional[Literal["verl", "trl"]] = None
    train: Optional[str] = None
    pairs_from: Optional[Union[str, FailuresSpec]] = None  # a train dataset, or failures (the flywheel)
    select_on: Optional[str] = None
    early_stop_on: Optional[str] = None
    evaluate: Optional[list[str]] = None
    reward: Optional[Literal["dense", "sparse"]] = None
    rollout: Optional[str] = None  # protocol name used for RL rollouts / sampling
    # The prompt template (registry/prompts.yaml) a trained phase trains and samples on. Unset:
    # its rollout protocol's `prompt:`, else its select protocol's, else the study's evaluation
    # protocol's (evaluate.every_phase, else final), else the model's defaults (`plan.expand`).
    prompt: Optional[str] = None
    protocol: Optional[str] = None  # protocol name for eval / best_of_n generation
    n: Optional[int] = Field(default=None, gt=0)  # best_of_n samples per problem
    # best_of_n on a problem whose prompt shows no public test (engine.isolation.public): unset,
    # validation refuses the dataset; `first` takes its first sample, and the pages say how many did.
    without_public: Optional[Literal["first"]] = None
    rounds: Optional[int] = Field(default=None, ge=1)  # repair rounds
    curriculum: Optional[Literal["none", "difficulty"]] = None
    hparams: Optional[dict[str, Scalar]] = None
    overrides: Optional[dict[str, Any]] = None  # passed verbatim to the trainer
    resources: Optional[Resources] = None
    pairs: Optional[PairsSpec] = None  # dpo: how preference pairs are built from judged samples
    select_metric: Optional[str] = None  # what `select_on` maximises (default accepted@1)
    early_stop: Optional[EarlyStopSpec] = None
    cycles: Optional[int] = Field(default=None, ge=1)  # raft: sample → judge → SFT rounds
    samples_per_prompt: Optional[int] = Field(default=None, ge=1)  # raft: samples per training problem
    # repair training return: `last` = pass_ratio of the last round, `sum` = summed over rounds;
    # both add 0.2 for an accepted last answer and subtract round_penalty per extra round.
    repair_return: Optional[Literal["last", "sum"]] = None
    round_penalty: Optional[float] = Field(default=None, ge=0)
    # Rollouts kept in traces/rollouts.jsonl per training step: a number, or `all`.
    traces: Optional[Union[Annotated[int, Field(ge=1)], Literal["all"]]] = None
    mix: Optional[RepairMixSpec] = None  # sft: format-repair rows from another run's failures
    endpoint: Optional[EndpointSpec] = None  # eval phases: the model is served elsewhere


class PhaseSpec(PhaseFields):
    kind: PhaseKind


class VariantSpec(PhaseFields):
    phase: str
