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
from engine.spec.base import StrictModel
from engine.spec.load import load_model_file

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
    # Long sequences (registry/hardware.yaml says where each comes from): a decode step reads each
    # sequence's KV cache (engine/price/decode.py); a token trained or scored in a sequence of L tokens
    # costs (1 + L / attention_tokens) times one in a short sequence (attention's FLOPs grow with L).
    attention_tokens: float = Field(default=40000, gt=0)
    # KV cache bytes per token per billion parameters (it depends on layers and KV heads, not on size alone)
    kv_bytes_per_token_per_b: float = Field(default=10000, gt=0)
    # each doubling of an engine's GPUs (tp) keeps this share of its speed-up (the all-reduces between
    # them): an engine of tp GPUs decodes tp x tp_efficiency^log2(tp) as fast as one
    tp_efficiency: float = Field(default=0.8, gt=0, le=1)
    # the KV cache is read at this share of the bandwidth the weights are read at (paged attention)
    kv_read_share: float = Field(default=0.5, gt=0, le=1)
    # the share of bf16 peak a decode step's matmuls reach: what of a sequence's decode cost is compute
    # (it scales with a GPU's FLOP/s) when a profile is scaled from another by its datasheet
    decode_mfu: float = Field(default=0.4, gt=0, le=1)
    # the same for training and forward passes (6N FLOPs a trained token, 2N a scored one)
    train_mfu: float = Field(default=0.6, gt=0, le=1)
    # bytes of disk a verl checkpoint takes per parameter (fp32 weights and Adam's two moments, sharded)
    checkpoint_bytes_per_param: float = Field(default=12, gt=0)
    # GPU memory a trained parameter needs in training: bf16 weights and grads, fp32 master and Adam
    train_bytes_per_param: float = Field(default=16, gt=0)

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
    attention_tokens: Optional[float] = Field(default=None, gt=0)
    kv_bytes_per_token_per_b: Optional[float] = Field(default=None, gt=0)
    tp_efficiency: Optional[float] = Field(default=None, gt=0, le=1)
    kv_read_share: Optional[float] = Field(default=None, gt=0, le=1)
    decode_mfu: Optional[float] = Field(default=None, gt=0, le=1)
    train_mfu: Optional[float] = Field(default=None, gt=0, le=1)


class PowerPrior(StrictModel):
    accepted: float = Field(default=0.3, gt=0, lt=1)
    seed_sd: float = Field(default=0.015, ge=0)
    pair_correlation: float = Field(default=0.6, ge=0, lt=1)
    sample_correlation: float = Field(default=0.5, ge=0, le=1)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    power: float = Field(default=0.8, gt=0, lt=1)


class Datasheet(StrictModel):
    """A GPU's published figures: what a profile scaled from another (`scaled_from`) is scaled by."""

    memory_gb: float = Field(gt=0)
    memory_tb_s: float = Field(gt=0)  # HBM (or GDDR) bandwidth
    bf16_tflops: float = Field(gt=0)  # dense bf16 tensor FLOP/s, no sparsity
    source: str


class ProfileEntry(StrictModel):
    description: str
    slot: Literal["GPU", "CPU"]
    slots_per_node: int = Field(ge=0)
    params_b: float = Field(gt=0)
    # a GPU's memory (GB): what the rollout engine's KV cache can hold beside the weights (absent: the
    # datasheet's, else no limit)
    memory_gb: Optional[float] = Field(default=None, gt=0)
    datasheet: Optional[Datasheet] = None
    # another profile whose measured constants this one scales by the two datasheets (`scaled`); its
    # own `constants` then override single ones
    scaled_from: Optional[str] = None
    constants: dict[str, Band] = Field(default_factory=dict)
    priors: Optional[PriorsOverride] = None
    fitted_from: Optional[str] = None  # the study whose lineage `price --fit` read

    @model_validator(mode="after")
    def _complete(self) -> "ProfileEntry":
        if self.scaled_from and self.datasheet is None:
            raise ValueError(f"scaled_from {self.scaled_from!r} needs this profile's datasheet "
                             "(memory_gb, memory_tb_s, bf16_tflops, source)")
        if self.memory_gb is None and self.datasheet is not None:
            self.memory_gb = self.datasheet.memory_gb
        missing = [] if self.scaled_from else [n for n in NAMES if n not in self.constants]
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


# How a constant follows a GPU's datasheet when a profile is scaled from a measured one: an empty
# engine's decode step reads the weights (bandwidth); a token's cost in training, a forward pass or a
# sequence's decode is part compute (its FLOPs at `train_mfu` / `decode_mfu` of peak), which scales
# with FLOP/s, part the work neither figure moves; start-ups, saves and the judge stay.
BANDWIDTH_TIMES = frozenset({"tail_ms", "gen_step_ms"})
COMPUTE_SPEEDS = {"logprob_tok_s": 2, "update_tok_s": 6, "sft_tok_s": 6}  # FLOPs a token per parameter
DECODE_PER_SEQ = frozenset({"rollout_tok_s", "gen_step_ms_per_seq", "gen_max_tok_s"})


def scaled(entry: ProfileEntry, base: ProfileEntry, base_name: str, priors: Priors) -> dict[str, Band]:
    """`base`'s constants carried to `entry`'s GPU by the ratio of their datasheets."""
    mine, theirs = entry.datasheet, base.datasheet
    if mine is None or theirs is None:
        raise UserError(f"profile scaled from {base_name!r}: both need a `datasheet:`")
    bw, fl = mine.memory_tb_s / theirs.memory_tb_s, mine.bf16_tflops / theirs.bf16_tflops
    def flops_ms(per_param: float, mfu: float) -> float:  # one token's FLOPs on the base GPU
        return per_param * base.params_b * 1e9 / (theirs.bf16_tflops * 1e12 * mfu) * 1000

    def carried(ms: float, compute_ms: float) -> float:  # the compute share scales with FLOP/s, the rest stays
        share = min(ms, compute_ms)
        return ms - share + share / fl

    def per_seq_ms(ms: float) -> float:
        return carried(ms, flops_ms(2, priors.decode_mfu))

    out = {}
    for name, band in base.constants.items():
        if name in BANDWIDTH_TIMES:
            f = (lambda v: v / bw)
            why = f"/ {bw:.2f} (memory bandwidth {mine.memory_tb_s:g} / {theirs.memory_tb_s:g} TB/s)"
        elif name in COMPUTE_SPEEDS:
            compute = flops_ms(COMPUTE_SPEEDS[name], priors.train_mfu)
            f = (lambda v, c=compute: 1000 / carried(1000 / v, c) if v else 0.0)
            why = f"its compute share x {fl:.2f} (bf16 {mine.bf16_tflops:g} / {theirs.bf16_tflops:g} TFLOP/s)"
        elif name == "gen_step_ms_per_seq":
            f, why = per_seq_ms, "its compute share / the FLOP/s ratio"
        elif name in DECODE_PER_SEQ:
            f, why = (lambda v: 1000 / per_seq_ms(1000 / v) if v else 0.0), "its compute share x the FLOP/s ratio"
        else:
            f, why = (lambda v: v), "unchanged (not bound by the GPU)"
        values = sorted((f(band.p10), f(band.p90)))
        p10, p90 = (values[1], values[0]) if band.p10 > band.p90 else (values[0], values[1])
        out[name] = Band(p10=round(p10, 6), p50=round(f(band.p50), 6), p90=round(p90, 6),
                         source=f"{base_name} {why}; {base_name}: {band.source}")
    return {**out, **entry.constants}


def hardware_file(registry: Optional[Path] = None) -> Path:
    return Path(registry or shipped("registry")) / HARDWARE_FILE


def load_profiles(registry: Optional[Path] = None, extra: Optional[Path] = None) -> HardwareFile:
    """The registry's hardware profiles, with those of a user's own file (`--hardware FILE`, outside
    the installed package) added over them: its profiles win, its priors and power replace."""
    path = hardware_file(registry)
    if not path.is_file():
        raise UserError(f"no hardware profiles at {path}")
    catalog = load_model_file(path, HardwareFile)[0]
    if extra is None:
        return catalog
    extra = Path(extra)
    if not extra.is_file():
        raise UserError(f"--hardware {extra}: no such file (a YAML file with `profiles:`, as registry/hardware.yaml)")
    mine = load_model_file(extra, HardwareFile)[0]
    fields_set = mine.model_fields_set
    return HardwareFile(profiles={**catalog.profiles, **mine.profiles},
                        priors=mine.priors if "priors" in fields_set else catalog.priors,
                        power=mine.power if "power" in fields_set else catalog.power)


def load_profile(name: str, registry: Optional[Path] = None, extra: Optional[Path] = None) -> Profile:
    catalog = load_profiles(registry, extra)
    own = load_model_file(Path(extra), HardwareFile)[0].profiles if extra is not None else {}
    path = Path(extra) if name in own else hardware_file(registry)
    if name not in catalog.profiles:
        raise UserError(f"unknown hardware profile {name!r}; {path} has: {', '.join(catalog.profiles)} "
                        "(add your own in a file of yours and pass --hardware FILE, or fit one with "
                        "`rlvr-run price SPEC --fit`)")
    entry = catalog.profiles[name]
    priors = catalog.priors
    if entry.priors is not None:
        priors = priors.model_copy(update=entry.priors.model_dump(exclude_none=True))
    if entry.scaled_from:
        if entry.scaled_from not in catalog.profiles or entry.scaled_from == name:
            raise UserError(f"hardware profile {name!r} in {path}: scaled_from {entry.scaled_from!r} is not "
                            f"another profile (known: {', '.join(catalog.profiles)})")
        base = load_profile(entry.scaled_from, registry, extra).entry
        entry = entry.model_copy(update={"constants": scaled(entry, base, entry.scaled_from, priors),
                                         "scaled_from": None})
    if any(entry.constants[n].p50 <= 0 for n in ("gen_step_ms", "sft_tok_s", "update_tok_s")):
        raise UserError(f"hardware profile {name!r} in {path} is not calibrated (its gen_step_ms, sft_tok_s or "
                        "update_tok_s is 0); run bench/price_calibrate.py or `rlvr-run price SPEC --fit`")
    return Profile(name=name, entry=entry, priors=priors, power=catalog.power, path=path)
