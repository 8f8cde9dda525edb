"""Every check a dry run makes, in one pass: the spec, the isolation rules, the plan, the trainers.

`rlvr-run validate` and `rlvr-run SPEC` both go through here, so `validate` never says ok to
a spec a dry run would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from engine.errors import Diagnostic, SpecError
from engine.isolation.validate import check_spec
from engine.plan.expand import plan
from engine.plan.model import Plan
from engine.spec.validated import ValidatedSpec
from engine.train.select_metric import select_metric_problems
from engine.train.trl_config import trl_run_problems
from engine.train.verl_checks import plan_run_problems
from engine.verify.declared import check_declarations, read_declarations
from engine.verify.leakage import confirm_by_execution


@dataclass(frozen=True, kw_only=True)
class Checked:
    validated: ValidatedSpec
    plan: Plan


def preflight(path: Path, *, content: bool = True, on_step: Optional[Callable[[str], None]] = None) -> Checked:
    """The validated spec and its plan; raises SpecError listing every problem of every stage."""
    validated, diags = check_spec(path, content=content, on_step=on_step, confirm=confirm_by_execution)
    if validated is None:
        raise _sorted(diags)
    diags += check_declarations(validated)
    if content and not diags:
        _declare(validated)
    the_plan = plan(validated)
    diags += (plan_run_problems(the_plan.runs, validated) + trl_run_problems(the_plan.runs, validated)
              + select_metric_problems(the_plan.runs, validated))
    if diags:
        raise _sorted(diags)
    return Checked(validated=validated, plan=the_plan)


def _declare(validated: ValidatedSpec) -> None:
    """What the datasets' `verified:` keep: on the plan, in lineage, and a refusal to really run
    a dataset that was never verified."""
    declared = read_declarations(validated)
    validated.verified = declared.notes
    validated.warnings += declared.warnings
    validated.unverified += declared.missing


def _sorted(diags: list[Diagnostic]) -> SpecError:
    return SpecError(sorted(diags, key=lambda d: (d.file, d.line, d.col)))
