"""Hardware profiles (`registry/hardware.yaml`): the cost model's constants, each a P10/P50/P90 band.

A forecast draws every constant ONCE per study (`Profile.draw`): runs share hardware and
software, so their errors are correlated; drawing per run would shrink the band falsely.
A band is read as a split lognormal through its three points.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal, Mapping, Optional

from pydantic import Field, model_validator

from engine.errors import UserError
from engine.resources import shipped
from engine.spec.load import load_model_file
from engine.spec.model import StrictModel

HARDWARE_FILE = "hardware.yaml"
Z90 = 1.2815515655446004  # the standard normal's 90th percentile


class Band(StrictModel):
    p10: float = Field(ge=0)
    p50: float = Field(ge=0)
    p90: float = Field(ge=0)
    source: str

    @model_validator(mode="after")
    def _ordered(self) -> "Band":
        lo, hi = sorted((self.p10, self.p90))
        if not lo <= self.p50 <= hi:
            raise ValueError(f"p50 {self.p50} lies outside its band [{self.p10}, {self.p90}]")
        return self

    def at(self, z: float) -> float:
        """The value `z` standard deviations above the median (z = ±1.28 gives p90 / p10)."""
        side = self.p90 if z >= 0 else self.p10
        if self.p50 <= 0 or side <= 0:
            return self.p50
        return self.p50 * (side / self.p50) ** (abs(z) / Z90)


@dataclass(frozen=True)
class Constants:
    """One draw of a profile's constants (seconds, tokens per second per slot)."""

    rollout_tok_s: float
    tail_ms: float
    logprob_tok_s: float
    update_tok_s: float
    sft_tok_s: float
    gen_max_tok_s: float
    gen_step_ms: float
    gen_step_ms_per_seq: float
    judge_cpu_s: float
    judge_overlap: float
    timeout_rate: float
    trainer_start_s: float
    engine_start_s: float
    save_s: float
    merge_s: float
    step_overhead_s: float


NAMES = tuple(f.name for f in fields(Constants))
# Constants whose high value makes a study faster (speeds, the judging hidden behind generation):
# their slow end is p10, so a draw toward slow takes them low.
FASTER_WHEN_HIGH = frozenset({"rollout_tok_s", "logprob_tok_s", "update_tok_s", "sft_tok_s", "gen_max_tok_s",
                              "judge_overlap"})


class Priors(StrictModel):
    prompt_tokens: dict[str, float] = Field(default_factory=lambda: {"default": 400})
    response_median_tokens: float = Field(default=450, gt=0)
    response_sigma: float = Field(default=0.6, ge=0)
    sft_target_tokens: float = Field(default=450, gt=0)
    failing_share: float = Field(default=0.6, ge=0, le=1)
    dpo_pair_yield: float = Field(default=0.5, ge=0, le=1)
    raft_accept_share: float = Field(default=0.3, ge=0, le=1)
    feedback_tokens: float = Field(default=150, ge=0)
    dense_timeout_tests: float = Field(default=5, ge=1)
    # Judging a sample costs the tests it runs times one test's seconds (registry/hardware.yaml): a
    # problem's tests by dataset source, and how much longer one of a problem's most demanding tests
    # takes than its average test (`tests: {most_demanding: N}`).
    tests_per_problem: dict[str, float] = Field(default_factory=lambda: {"default": 1.0})
    demanding_test_factor: float = Field(default=1.0, gt=0)
    # Long sequences (registry/hardware.yaml says where each comes from): decoding a token reads every
    # earlier token's KV cache, so decode throughput is rollout_tok_s / (1 + context / kv_context_tokens);
    # a token trained or scored in a sequence of L tokens costs (1 + L / attention_tokens) times one in
    # a short sequence (attention's FLOPs grow with L, the weights' do not).
    kv_context_tokens: float = Field(default=5000, gt=0)
    attention_tokens: float = Field(default=40000, gt=0)
    # KV cache bytes per token per billion parameters (it depends on layers and KV heads, not on size alone)
    kv_bytes_per_token_per_b: float = Field(default=10000, gt=0)

    def prompt(self, source: str) -> float:
        return self.prompt_tokens.get(source, self.prompt_tokens.get("default", 400))

    def tests(self, source: str) -> float:
        return max(self.tests_per_problem.get(source, self.tests_per_problem.get("default", 1.0)), 1.0)


class PriorsOverride(StrictModel):
    prompt_tokens: Optional[dict[str, float]] = None
    response_median_tokens: Optional[float] = Field(default=None, gt=0)
    response_sigma: Optional[float] = Field(default=None, ge=0)
    sft_target_tokens: Optional[float] = Field(default=None, gt=0)
    failing_share: Optional[float] = Field(default=None, ge=0, le=1)
    dpo_pair_yield: Optional[float] = Field(default=None, ge=0, le=1)
    raft_accept_share: Optional[float] = Field(default=None, ge=0, le=1)
    feedback_tokens: Optional[float] = Field(default=None, ge=0)
    dense_timeout_tests: Optional[float] = Field(default=None, ge=1)
    kv_context_tokens: Optional[float] = Field(default=None, gt=0)
    attention_tokens: Optional[float] = Field(default=None, gt=0)
    kv_bytes_per_token_per_b: Optional[float] = Field(default=None, gt=0)


class PowerPrior(StrictModel):
    accepted: float = Field(default=0.3, gt=0, lt=1)
    seed_sd: float = Field(default=0.015, ge=0)
    pair_correlation: float = Field(default=0.6, ge=0, lt=1)
    sample_correlation: float = Field(default=0.5, ge=0, le=1)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    power: float = Field(default=0.8, gt=0, lt=1)


class ProfileEntry(StrictModel):
    description: str
    slot: Literal["GPU", "CPU"]
    slots_per_node: int = Field(ge=0)
    params_b: float = Field(gt=0)
    # a GPU's memory (GB): what the rollout engine's KV cache can hold beside the weights (absent: no limit)
    memory_gb: Optional[float] = Field(default=None, gt=0)
    constants: dict[str, Band]
    priors: Optional[PriorsOverride] = None
    fitted_from: Optional[str] = None  # the study whose lineage `price --fit` read

    @model_validator(mode="after")
    def _complete(self) -> "ProfileEntry":
        missing = [n for n in NAMES if n not in self.constants]
        unknown = [n for n in self.constants if n not in NAMES]
        if missing or unknown:
            raise ValueError("constants " + "; ".join(
                p for p in (f"missing: {', '.join(missing)}" if missing else "",
                            f"unknown: {', '.join(unknown)} (known: {', '.join(NAMES)})" if unknown else "") if p))
        return self


class HardwareFile(StrictModel):
    profiles: dict[str, ProfileEntry]
    priors: Priors = Field(default_factory=Priors)
    power: PowerPrior = Field(default_factory=PowerPrior)


@dataclass(frozen=True)
class Profile:
    name: str
    entry: ProfileEntry
    priors: Priors
    power: PowerPrior
    path: Path

    @property
    def slot(self) -> str:
        return self.entry.slot

    def draw(self, z: Mapping[str, float] | float = 0.0) -> Constants:
        """Constants at `z` standard deviations toward slow (a float for all, or one per name)."""
        def value(name: str) -> float:
            zz = z if isinstance(z, (int, float)) else z.get(name, 0.0)
            return self.entry.constants[name].at(-zz if name in FASTER_WHEN_HIGH else zz)
        return Constants(**{name: value(name) for name in NAMES})

    def median(self) -> Constants:
        return self.draw(0.0)


def hardware_file(registry: Optional[Path] = None) -> Path:
    return Path(registry or shipped("registry")) / HARDWARE_FILE


def load_profiles(registry: Optional[Path] = None) -> HardwareFile:
    path = hardware_file(registry)
    if not path.is_file():
        raise UserError(f"no hardware profiles at {path}")
    return load_model_file(path, HardwareFile)[0]


def load_profile(name: str, registry: Optional[Path] = None) -> Profile:
    path = hardware_file(registry)
    catalog = load_profiles(registry)
    if name not in catalog.profiles:
        raise UserError(f"unknown hardware profile {name!r}; {path} has: {', '.join(catalog.profiles)} "
                        "(add your own there, or fit one with `rlvr-run price SPEC --fit`)")
    entry = catalog.profiles[name]
    priors = catalog.priors
    if entry.priors is not None:
        priors = priors.model_copy(update=entry.priors.model_dump(exclude_none=True))
    if any(entry.constants[n].p50 <= 0 for n in ("gen_step_ms", "sft_tok_s", "update_tok_s")):
        raise UserError(f"hardware profile {name!r} in {path} is not calibrated (its gen_step_ms, sft_tok_s or "
                        "update_tok_s is 0); run bench/price_calibrate.py or `rlvr-run price SPEC --fit`")
    return Profile(name=name, entry=entry, priors=priors, power=catalog.power, path=path)
