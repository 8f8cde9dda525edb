"""The kinds of phase a spec names, apart from the spec's models: the run records and the
status views read them without importing the spec's schema."""

from __future__ import annotations

from enum import Enum


class PhaseKind(str, Enum):
    eval = "eval"
    best_of_n = "best_of_n"
    sft = "sft"
    dpo = "dpo"
    grpo = "grpo"
    repair = "repair"
    raft = "raft"  # rejection-sampling fine-tuning: sample, judge, SFT on the accepted, repeat
