"""Best-of-n never chooses blind: every problem it chooses on has public tests, or the phase says
what happens instead.

Best-of-n ranks its samples by the public tests (`engine.isolation.public`: what the prompt
showed). On a problem without any, the ranking has nothing to go on; rather than let a length
tie-break pick silently, validation refuses each dataset a best-of-n phase (or variant) samples
on that holds such problems, unless the phase declares `without_public: first` (the first
sample is taken, and the pages count those problems). It reads the datasets, so it runs with
the content checks.
"""

from __future__ import annotations

from typing import Callable, Optional

from engine.data.dataset import LoadedDataset
from engine.errors import UserError
from engine.isolation.public import public_view
from engine.prompts.templates import PromptChoice
from engine.spec.model import PhaseKind
from engine.spec.phases import PhaseFields
from engine.spec.refs import overlay
from engine.spec.validated import RuleReport, ValidatedSpec

Loader = Callable[[str], LoadedDataset]


def check_best_of_n(validated: ValidatedSpec, load: Loader) -> RuleReport:
    report = RuleReport()
    spec = validated.spec
    counted: dict[tuple[str, Optional[str]], tuple[int, int, str]] = {}
    for section, name, fields in _best_of_n_entries(validated):
        if fields.without_public == "first":
            continue
        protocol = spec.protocols.get(fields.protocol or "")
        if protocol is None:
            continue  # an unknown protocol is the reference check's error
        template = protocol.prompt
        for dataset in _sampled_on(validated, fields):
            if (dataset, template) not in counted:
                try:
                    problems = load(dataset).problems
                except UserError as exc:  # never a pass: a real run refuses to start while it stands
                    reason = str(exc).splitlines()[0]
                    report.warnings.append(f"best-of-n {name!r}: public tests of {dataset!r} not checked ({reason})")
                    report.unverified.append(f"best-of-n public tests of {dataset}")
                    counted[(dataset, template)] = (0, 0, "")
                    continue
                choice = PromptChoice(registry=validated.registry, template=template, model=spec.base_model)
                # a stdio problem's public tests are its source's marks: no prompt to render
                blind = [p.id for p in problems
                         if public_view(p, choice.prompt(p) if p.kind == "function" else "") is None]
                counted[(dataset, template)] = (len(blind), len(problems), blind[0] if blind else "")
            blind_count, total, example = counted[(dataset, template)]
            if blind_count:
                report.errors.append(validated.loaded.diagnostic(
                    (section, name),
                    f"best-of-n {name!r} samples on {dataset!r}, where {blind_count} of {total} problems show no public "
                    f"test in their prompt (e.g. {example}): its choice there would be blind",
                    f"declare `without_public: first` on {name!r} (their first sample is scored; the pages count "
                    f"them), or evaluate it on datasets whose prompts show examples", rule="best-of-n"))
    return report


def _best_of_n_entries(validated: ValidatedSpec):  # type: ignore[no-untyped-def]
    spec = validated.spec
    for name, phase in spec.phases.items():
        if phase.kind == PhaseKind.best_of_n:
            yield "phases", name, phase
    for name, variant in spec.variants.items():
        phase = spec.phases.get(variant.phase)
        if phase is not None and phase.kind == PhaseKind.best_of_n:
            yield "variants", name, overlay(phase, variant)


def _sampled_on(validated: ValidatedSpec, fields: PhaseFields) -> list[str]:
    """The datasets a best-of-n run samples on: those of the evaluations attached to it."""
    schedules = [fields.evaluate or [], *(s.datasets for s in (validated.spec.evaluate.every_phase,
                                                              validated.spec.evaluate.final) if s is not None)]
    return list(dict.fromkeys(name for names in schedules for name in names if name in validated.spec.datasets))
