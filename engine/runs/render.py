"""Launch scripts: `templates/launch/<kind>.sh.j2` rendered with StrictUndefined.

Every interpolated value goes through the `shq` filter (POSIX shell quoting); a
template that names a variable the context lacks fails loudly instead of
rendering an empty string into a command line.
"""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import jinja2

from engine.errors import UserError
from engine.plan.model import MODEL_KINDS, Plan, Run
from engine.resources import ENGINE_ROOT, TEMPLATES
from engine.spec.model import PhaseKind
from engine.train import verl_overrides
from engine.train.launch import accelerate_launch

TEMPLATE_DIR = TEMPLATES / "launch"


@dataclass(frozen=True, kw_only=True)
class RenderContext:
    """Where things are when the script runs (absolute paths)."""

    run_dir: Path
    model_path: str  # the model this run starts from or evaluates (HF id or folder)
    engine_root: Path = ENGINE_ROOT
    parent_dirs: tuple[Path, ...] = field(default_factory=tuple)
    samples_dir: Optional[str] = None  # for evaluations of a best_of_n run
    params_b: Optional[float] = None  # the base model's size (billions of parameters), when known
    # The interpreter is chosen when the script runs (the executor exports the one
    # running rlvr-run), so a frozen script never names one machine's venv.
    python: str = '"$RLVR_PYTHON"'


def shq(value: Any) -> str:
    return shlex.quote(str(value))


@functools.lru_cache(maxsize=8)
def _environment(template_dir: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["shq"] = shq
    return env


def render_launch(run: Run, context: RenderContext, *, template_dir: Path = TEMPLATE_DIR) -> str:
    """The launch.sh text for one run."""
    name = template_name(run)
    try:
        template = _environment(template_dir).get_template(name)
    except jinja2.TemplateNotFound:
        raise UserError(f"no launch template for {run.kind.value!r} runs on {run.trainer or 'no trainer'}: "
                        f"expected {template_dir / name}") from None
    return template.render(run=run, ctx=context, template=name, **_kind_vars(run, context))


def template_name(run: Run) -> str:
    """`<trainer>_<kind>.sh.j2` for trained kinds (each trainer launches differently), else `<kind>.sh.j2`."""
    return f"{run.trainer}_{run.kind.value}.sh.j2" if run.trainer else f"{run.kind.value}.sh.j2"


def _kind_vars(run: Run, context: RenderContext) -> dict[str, Any]:
    out: dict[str, Any] = {"samples_dir": context.samples_dir}
    if run.trainer == "verl" and run.kind in verl_overrides.CONFIG_NAMES:
        paths = verl_overrides.VerlPaths(run_dir=context.run_dir, model_path=context.model_path,
                                  reward_path=context.engine_root / "reward.py")
        out["overrides"] = verl_overrides.verl_overrides(run, paths)
        out["gpus"] = max(1, run.resources.gpus)
        out["time_limit_h"] = run.resources.time_limit_h or verl_overrides.DEFAULT_TIME_LIMIT_H
        out["tracking_env"] = verl_overrides.tracking_env(run)
        out["watch"] = verl_overrides.watched(run)
        out["plugin_modules"] = ",".join(verl_overrides.plugin_modules(run))
    if run.trainer == "trl":
        out["launch"] = accelerate_launch(run.resources.gpus, context.params_b, run.id)
    if run.kind == PhaseKind.best_of_n:
        out["n"] = run.config.get("n") or _protocol_n(run)
    if run.kind == PhaseKind.repair:
        out["rounds"] = run.config.get("rounds") or 2
    if run.kind in (PhaseKind.grpo, PhaseKind.repair):
        out["reward"] = run.config.get("reward") or "dense"
    return out


def _protocol_n(run: Run) -> int:
    return next((p.n for p in run.protocols.values() if p.n), 1)


def launch_context(run: Run, plan: Plan, spec_dir: Path, base_model: Any,
                   params_b: Optional[float] = None) -> RenderContext:
    """Paths for `run` inside `spec_dir` (runs/<spec>/): its dir, its model, its inputs."""
    parents = tuple(spec_dir / p for p in run.parents)
    samples = None
    if run.parents and plan.by_id(run.parents[0]).kind == PhaseKind.best_of_n:
        samples = str(parents[0] / "outputs" / "samples")
    return RenderContext(run_dir=spec_dir / run.id, model_path=_model_of(run, plan, spec_dir, base_model),
                         parent_dirs=parents, samples_dir=samples, params_b=params_b)


def _model_of(run: Run, plan: Plan, spec_dir: Path, base_model: Any) -> str:
    """The model a run starts from: its nearest trained ancestor's model/, else the base model."""
    current = run
    while current.model_parent:
        parent = plan.by_id(current.model_parent)
        if parent.kind in MODEL_KINDS:
            return str(spec_dir / parent.id / "model")
        current = parent
    return verl_overrides.model_path(base_model)
