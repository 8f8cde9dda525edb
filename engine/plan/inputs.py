"""What a run takes from outside its spec, frozen into its config at planning: the files its
datasets read (`dataset_files`) and the registry entries it consumes (`frozen_registry`), as
JSON (`as_json`). A run reads them from its config.yaml, never from the spec or the registry
as they are later, so an edit there makes new runs instead of resuming old ones on new inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel

from engine.plan.model import RunDataset
from engine.spec.model import ModelRef, ProtocolSpec, Spec
from engine.spec.registry import Registry
from engine.spec.validated import ValidatedSpec


def dataset_files(validated: ValidatedSpec) -> dict[str, dict[str, str]]:
    """Dataset name → `data_file` / `ids_file`: the files it reads, as found at plan time.

    The exporter reads them from config.yaml (never the spec, which may have changed).
    Paths inside the project are relative to its root, so the ids of the same spec do
    not depend on where the project is checked out.
    """
    from engine.spec.resolve import find_file

    root = validated.registry.project_root.resolve()
    out: dict[str, dict[str, str]] = {}
    for name, ds in validated.spec.datasets.items():
        files: dict[str, str] = {}
        found = find_file(validated.loaded, validated.registry, ds.path) if ds.path else None
        if found is not None:
            files["data_file"] = _project_path(found, root)
        if name in validated.idlist_paths:
            files["ids_file"] = _project_path(validated.idlist_paths[name], root)
        if files:
            out[name] = files
    return out


def _project_path(path: Path, root: Path) -> str:
    path = path.resolve()
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def frozen_registry(registry: Registry, spec: Spec, datasets: dict[str, RunDataset],
                    protocols: Iterable[ProtocolSpec], templates: Iterable[str] = ()) -> dict[str, Any]:
    """The registry entries a run consumes, as they are now: its datasets' sources and the prompt
    templates it can render (those its protocols name, the one it trains on, `templates`, the
    defaults for the base model's style and the fragments they include). They enter the run's config, so its id, and the run reads them
    from there (`engine.plan.frozen.run_registry`): an edited registry makes new runs, never old
    records resumed with new inputs."""
    sources = sorted({spec.datasets[n].source for n in datasets})
    named = {p.prompt for p in protocols if p.prompt} | set(templates)
    model = spec.base_model
    style = "chat" if not isinstance(model, ModelRef) or model.chat else "completion"
    prompts = {name: entry for name, entry in registry.prompts.items()
               if name in named or name.startswith("_")
               or any(sel.split("/")[1:2] == [style] for sel in entry.default_for)}
    return {"datasets": {n: as_json(registry.datasets[n]) for n in sources if n in registry.datasets},
            "prompts": {n: as_json(e) for n, e in prompts.items()}}


def as_json(value: Any) -> Any:
    """A spec or registry model as the JSON a config holds (fields that are None left out); anything else as is."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True, by_alias=True)
    return value
