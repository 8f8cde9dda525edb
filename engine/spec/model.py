"""The experiment-matrix spec: pydantic models (extra="forbid").

Loading with line-numbered errors lives in `engine.spec.load`; this module only
declares the shape a researcher writes.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from engine.spec.kinds import PhaseKind

Scalar = Union[str, int, float, bool, None]
# The error type of the models' own checks (PydanticCustomError(SPEC_ADVICE, message, {"fix": ...})):
# reported in their words with their fix, never echoing the value (it may be a secret).
SPEC_ADVICE = "spec_advice"


# numpy seeds only 0..2**32-1, and every trainer seeds numpy with the run's seed.
SEED_MAX = 2**32 - 1


def _seed_range(value: int) -> int:
    if not 0 <= value <= SEED_MAX:
        shown = str(value) if len(str(value)) <= 24 else str(value)[:21] + "..."
        raise PydanticCustomError(SPEC_ADVICE, "seed {seed} is outside 0..4294967295, the seeds numpy (which the "
                                  "trainers seed) accepts", {"seed": shown, "fix": "use a seed from 0 to 4294967295"})
    return value


# strict: `true` or `1.5` is not a seed
Seed = Annotated[int, Field(strict=True), AfterValidator(_seed_range)]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Role(str, Enum):
    train = "train"
    valid = "valid"
    test = "test"
    regression = "regression"


TRAINED_KINDS = frozenset({PhaseKind.sft, PhaseKind.dpo, PhaseKind.grpo, PhaseKind.repair, PhaseKind.raft})


class ResponsePrior(StrictModel):
    """The response lengths a forecast assumes (`response_tokens:` on a protocol or a model): a
    lognormal of this median and sigma, clipped at the protocol's `max_tokens`. Pricing only: it
    changes no run (it is not part of a run's id nor of rule 5's protocol comparison)."""

    median: float = Field(gt=0)
    sigma: float = Field(default=0.6, ge=0, le=3)


class ModelRef(StrictModel):
    """A model spelled out instead of named from registry/models.yaml: what a registry entry says
    (`hf_id` or `path`, family, chat, size, context, response prior). A dry run that prices GPUs
    needs its size (`params_b`) when the registry does not know it."""

    path: Optional[str] = None  # a local folder or a hub id
    hf_id: Optional[str] = None  # a hub id (the registry's spelling); resolved into `path`
    family: str = "qwen2"
    chat: bool = True
    params_b: Optional[float] = Field(default=None, gt=0)  # billions of parameters
    context_len: Optional[int] = Field(default=None, gt=0)
    response_tokens: Optional[ResponsePrior] = None  # engine.spec.resolve checks one of path / hf_id


class DatasetSpec(StrictModel):
    source: str  # registry name (humaneval, mbpp, codecontests, local_jsonl, ...)
    split: Optional[str] = None
    ids: Optional[str] = None  # path to a frozen id list (registry/idlists/...)
    role: Role
    test_only: bool = False
    path: Optional[str] = None  # local files
    fields: Optional[dict[str, str]] = None  # field mapping for local files
    max_generated_tests: Optional[int] = Field(default=None, ge=0)
    # `require`: only problems whose tests a reference solution passes (`rlvr-run data verify`);
    # a checker name (engine.judge.checkers): also those that checker resolves, judged with it.
    verified: Optional[str] = Field(default=None, min_length=1)


class TestsSpec(StrictModel):
    """Which of a problem's tests the judge runs under a protocol (`tests:`), absent: all of them.
    `most_demanding: N` runs the N tests with the largest input (bytes of a stdio test's input, of
    the arguments a function test passes the function), ties in the tests' order; DeepCoder's
    reward runs its 15 largest."""

    most_demanding: int = Field(gt=0)


class ProtocolSpec(StrictModel):
    preset: Optional[str] = None  # registry/protocols.yaml name; fields below override it
    # The bounds every backend can honour alike (vLLM refuses temperature > 2 and an empty stop
    # string; top_k -1 or 0 is off). Greedy (temperature 0) with n > 1, n copies of one answer, is
    # refused once the protocol is resolved (engine.spec.resolve).
    temperature: Optional[float] = Field(default=None, ge=0, le=2)
    top_p: Optional[float] = Field(default=None, gt=0, le=1)
    top_k: Optional[int] = Field(default=None, ge=-1)
    max_tokens: Optional[int] = Field(default=None, gt=0)
    n: Optional[int] = Field(default=None, gt=0)
    stop: Optional[list[Annotated[str, Field(min_length=1)]]] = None
    seed: Optional[Seed] = None
    prompt: Optional[str] = None  # prompt template name (registry/prompts.yaml)
    # Rounds of repair at inference: a failing answer gets feedback from the PUBLIC tests and
    # another try, up to this many answers in all (absent: one answer, no repair).
    rounds: Optional[int] = Field(default=None, ge=1, le=10)
    # The response lengths the forecast assumes for this protocol (pricing only; absent: the model's
    # prior, else the hardware file's default). Reasoning models answer in thousands of tokens.
    response_tokens: Optional[ResponsePrior] = None
    # The tests the judge runs (reward or evaluation under this protocol); part of the protocol's
    # hash, so runs judged on other tests are never compared (rule 5).
    tests: Optional[TestsSpec] = None


class JudgeSpec(StrictModel):
    backend: Literal["local", "sandbox_fusion"] = "local"
    url: Optional[str] = None
    timeout_s: float = Field(default=6.0, gt=0)  # CPU seconds per test
    wall_timeout_s: Optional[float] = Field(default=None, gt=0)
    memory_mb: int = Field(default=1024, gt=0)
    concurrency: Optional[int] = Field(default=None, gt=0)
    compare: Literal["tokens", "exact", "float"] = "tokens"
    float_tol: float = Field(default=1e-6, ge=0)
    # true: judge (evaluate, reward) even where the local judge cannot isolate the network and the
    # filesystem; the pages then say so in bold. Unset (the default) refuses instead.
    allow_unsandboxed: Optional[bool] = None


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


class GenerationSpec(StrictModel):
    """How an evaluation generates; each field absent is decided from the evaluation's GPUs and the
    model's size (vllm where it is installed and a GPU is given, else hf; tensor parallelism only
    as wide as the weights need, one engine per remaining GPU group)."""

    backend: Optional[Literal["hf", "vllm"]] = None
    batch_size: Optional[int] = Field(default=None, ge=1)  # hf: prompts per forward batch
    tensor_parallel_size: Optional[int] = Field(default=None, ge=1)  # vllm: GPUs per engine
    gpu_memory_utilization: Optional[float] = Field(default=None, gt=0, le=1)  # vllm: share of each GPU's memory


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


class EvalSchedule(StrictModel):
    datasets: list[str]
    protocol: str
    # Evaluation is inference: by default one GPU when the evaluated phase uses GPUs,
    # not the (often 8-GPU) allocation of the training it follows.
    resources: Optional[Resources] = None
    generation: Optional[GenerationSpec] = None


class EvaluateSpec(StrictModel):
    every_phase: Optional[EvalSchedule] = None
    final: Optional[EvalSchedule] = None


class Waiver(StrictModel):
    """An explicit, reasoned exception to one isolation rule."""

    rule: int = Field(ge=1, le=5)
    reason: str = Field(min_length=1)
    dataset: Optional[str] = None
    datasets: Optional[list[str]] = None  # rule 3: a (training, evaluation) pair
    phase: Optional[str] = None


class LeakageSpec(StrictModel):
    """Content-level leakage check (isolation rule 3) settings."""

    # Defaults measured on the real HumanEval / MBPP / CodeContests files (engine.isolation.neardup):
    # no cross-dataset pair reaches 0.5; MBPP's own one-word-apart template statements
    # ("volume of a cone" / "of a cube") stay below 0.75; reworded copies stay above it.
    threshold: float = Field(default=0.75, gt=0, le=1)  # exact Jaccard of the shingle sets
    ngram: int = Field(default=3, ge=1)  # words per shingle (shingles stay inside a sentence)
    num_perm: int = Field(default=128, ge=16, le=1024)  # MinHash permutations (LSH candidate search)
    # Asymmetric scores (engine.isolation.overlap), measured by bench/leakage_recall.py on planted copies
    # and on the real HumanEval × MBPP × CodeContests pairs (docs/data-trust.md).
    containment: float = Field(default=0.85, gt=0, le=1)  # share of the smaller statement's shingles in the other
    reworded: float = Field(default=0.5, gt=0, le=1)  # mean of the content-word cosine and the shingle containment
    # By meaning (engine.isolation.semantic, the `semantic` extra): each evaluation problem's top
    # training neighbours and every pair at or above `semantic_review` are run against each other's
    # tests; a confirmed pair is a leak, one not confirmed at or above `semantic_warn` a warning.
    semantic: bool = True
    semantic_top_k: int = Field(default=5, ge=0, le=100)
    semantic_review: float = Field(default=0.7, gt=0, le=1)  # embedding cosine
    semantic_warn: float = Field(default=0.85, gt=0, le=1)


class TrackingSpec(StrictModel):
    """The user's own experiment tracker, passed through to the trainers (each value: its settings,
    e.g. `wandb: {project: p, mode: offline}`)."""

    wandb: Optional[dict[str, Scalar]] = None
    mlflow: Optional[dict[str, Scalar]] = None
    tensorboard: Optional[dict[str, Scalar]] = None


class ExecutorKind(str, Enum):
    local = "local"
    ray = "ray"
    slurm = "slurm"


class Transfer(str, Enum):
    shared = "shared"  # the runs directory is on storage every node mounts at the same path
    working_dir = "working_dir"  # each run directory is uploaded as the job's working_dir, outputs sent back


class ExecutorSpec(StrictModel):
    """Where the runs execute. `ray`: each launch.sh becomes a Ray job at `address` (the
    dashboard's HTTP address). With `transfer: shared` (the default) the run directories reach
    it through `shared_dir`, storage every node mounts at the same path, which must hold the
    runs directory; with `transfer: working_dir` each run directory travels as the job's
    working_dir and its outputs come back in the job's log when it ends. `slurm`: each launch.sh
    becomes an sbatch job (docs/executors.md); the run directories live under `shared_dir` (else
    the runs directory), which every node mounts; `partition`, `account`, `qos`, `time_limit_h`
    (hours by run kind, for runs whose `resources:` set none) and `sbatch_args` go to every job."""

    kind: ExecutorKind = ExecutorKind.local
    address: Optional[str] = None
    transfer: Optional[Transfer] = None
    shared_dir: Optional[str] = None
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    time_limit_h: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)  # run kind → hours
    sbatch_args: list[str] = Field(default_factory=list)


class DetectSpec(StrictModel):
    """What the study must be able to see: `validate` warns when a declared comparison's minimum
    detectable difference in accepted@1 (80 % power, 5 % two-sided) is larger than this."""

    min_effect: float = Field(gt=0, lt=1)


class Spec(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    base_model: Union[str, ModelRef]
    datasets: dict[str, DatasetSpec]
    protocols: dict[str, ProtocolSpec] = Field(default_factory=dict)
    judge: JudgeSpec = Field(default_factory=JudgeSpec)
    phases: dict[str, PhaseSpec]
    variants: dict[str, VariantSpec] = Field(default_factory=dict)
    seeds: list[Seed] = Field(min_length=1)
    evaluate: EvaluateSpec = Field(default_factory=EvaluateSpec)
    allow: list[Waiver] = Field(default_factory=list)
    leakage: LeakageSpec = Field(default_factory=LeakageSpec)
    tracking: Optional[TrackingSpec] = None
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec)
    detect: Optional[DetectSpec] = None
