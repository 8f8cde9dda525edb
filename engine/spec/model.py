"""The experiment-matrix spec: pydantic models (extra="forbid").

Loading with line-numbered errors lives in `engine.spec.load`; this module only
declares the shape a researcher writes, its phases in `engine.spec.phases`.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Literal, Optional, Union

from pydantic import Field

from engine.spec.base import Scalar, Seed, StrictModel
from engine.spec.kinds import PhaseKind
from engine.spec.phases import PhaseSpec, Resources, VariantSpec


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


class GenerationSpec(StrictModel):
    """How an evaluation generates; each field absent is decided from the evaluation's GPUs and the
    model's size (vllm where it is installed and a GPU is given, else hf; tensor parallelism only
    as wide as the weights need, one engine per remaining GPU group)."""

    backend: Optional[Literal["hf", "vllm"]] = None
    batch_size: Optional[int] = Field(default=None, ge=1)  # hf: prompts per forward batch
    tensor_parallel_size: Optional[int] = Field(default=None, ge=1)  # vllm: GPUs per engine
    gpu_memory_utilization: Optional[float] = Field(default=None, gt=0, le=1)  # vllm: share of each GPU's memory


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
