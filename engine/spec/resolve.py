"""Resolve a loaded spec against the registry: models, protocol presets, dataset sources, id lists.

After resolution every protocol has every field (so comparing two is comparing
values), base_model is a ModelRef, every dataset has its split and test_only
flag from the registry, and every `ids:` list is read and hashed.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from engine.errors import Diagnostic
from engine.files import exists
from engine.spec.load import LoadedSpec
from engine.spec.model import DatasetSpec, ModelRef, PhaseKind, ProtocolSpec, Spec
from engine.spec.phases import VariantSpec
from engine.spec.refs import PROTOCOL_USES
from engine.spec.registry import DatasetSource, Registry
from engine.spec.schema_errors import did_you_mean


@dataclass(kw_only=True)
class Resolution:
    spec: Spec
    sources: dict[str, DatasetSource] = field(default_factory=dict)
    idlist_hashes: dict[str, str] = field(default_factory=dict)
    idlist_paths: dict[str, Path] = field(default_factory=dict)
    dataset_fingerprints: dict[str, str] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _model(loaded: LoadedSpec, registry: Registry, out: list[Diagnostic]) -> ModelRef:
    base = loaded.spec.base_model
    if isinstance(base, ModelRef):
        if (base.path is None) == (base.hf_id is None):
            out.append(loaded.diagnostic(
                ("base_model",), "a spelled-out base_model names its weights once: `hf_id:` or `path:`, "
                + ("not both" if base.path else "and it has neither"),
                "write `hf_id: Qwen/Qwen2.5-Coder-7B-Instruct` (the hub) or `path: ./my-model` (a local folder)"))
            return base.model_copy(update={"path": base.path or base.hf_id or "", "hf_id": None})
        if base.hf_id is not None:  # the registry's spelling of a hub id: one `path` from here on
            base = base.model_copy(update={"path": base.hf_id, "hf_id": None})
        return _local_model(loaded, base, out)
    entry = registry.models.get(base)
    if entry is None:
        out.append(loaded.diagnostic(
            ("base_model",), f"unknown model {base!r}{did_you_mean(base, registry.models)}",
            f"name a model from registry/models.yaml ({', '.join(sorted(registry.models))}) "
            "or spell it out: `base_model: {hf_id: <HF id>, family: qwen2, chat: true, params_b: 7.6}` "
            "(or `path: <local dir>`)",
            at_value=True))
        return ModelRef(path=base)
    path = entry.build.folder(base) if entry.build else entry.hf_id
    # the entry's response prior travels with the runs' configs (not their ids: pricing only), so a
    # recorded study is re-forecast with the prior it was planned with, whatever the registry says later
    return ModelRef(path=path or base, family=entry.family, chat=entry.chat, response_tokens=entry.response_tokens)


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def _local_model(loaded: LoadedSpec, model: ModelRef, out: list[Diagnostic]) -> ModelRef:
    """A spelled-out model is a folder that exists (made absolute) or a hub id (`org/name`)."""
    path = Path(model.path).expanduser()
    found = path if path.is_absolute() else loaded.path.parent / path
    if exists(found, kind="dir"):
        return model.model_copy(update={"path": str(found.resolve())})
    if not path.is_absolute() and not model.path.startswith((".", "~")) and HUB_ID.fullmatch(model.path):
        return model
    out.append(loaded.diagnostic(
        ("base_model", "path"), f"model folder {model.path!r} does not exist (looked at {found}) and is not a hub id",
        "point `path:` at a Hugging Face model folder (relative paths are read from the spec's folder) "
        "or a hub id such as Qwen/Qwen2.5-Coder-7B-Instruct", at_value=True))
    return model


def _protocol(loaded: LoadedSpec, registry: Registry, name: str, proto: ProtocolSpec,
              out: list[Diagnostic]) -> ProtocolSpec:
    """defaults ⊕ preset ⊕ what the spec wrote; `preset` dropped so equal protocols compare equal."""
    merged = registry.protocol_defaults.model_dump(exclude={"preset"})
    if proto.preset is not None:
        preset = registry.protocols.get(proto.preset)
        if preset is None:
            out.append(loaded.diagnostic(
                ("protocols", name, "preset"),
                f"unknown protocol preset {proto.preset!r}{did_you_mean(proto.preset, registry.protocols)}",
                f"use a preset from registry/protocols.yaml ({', '.join(sorted(registry.protocols))})",
                at_value=True))
        else:
            merged |= preset.model_dump(exclude_unset=True, exclude={"preset"})
    merged |= proto.model_dump(exclude_unset=True, exclude={"preset"})
    if merged.get("prompt") is not None and merged["prompt"] not in registry.prompts:
        out.append(loaded.diagnostic(
            ("protocols", name, "prompt"),
            f"unknown prompt template {merged['prompt']!r}{did_you_mean(merged['prompt'], registry.prompts)}",
            f"name a template from registry/prompts.yaml ({', '.join(sorted(registry.prompts)) or 'none yet'})",
            at_value=True))
    return ProtocolSpec.model_validate(merged)


def _protocols(loaded: LoadedSpec, registry: Registry, out: list[Diagnostic]) -> dict[str, ProtocolSpec]:
    spec = loaded.spec
    resolved = {name: _protocol(loaded, registry, name, p, out) for name, p in spec.protocols.items()}
    for name, p in resolved.items():
        _greedy_copies(loaded, name, p, out)
    # Phases and schedules may name a registry preset directly: it becomes a protocol of that name.
    used = [getattr(f, use) for f in (*spec.phases.values(), *spec.variants.values()) for use in PROTOCOL_USES]
    used += [s.protocol for s in (spec.evaluate.every_phase, spec.evaluate.final) if s is not None]
    for name in used:
        if name is not None and name not in resolved and name in registry.protocols:
            resolved[name] = _protocol(loaded, registry, name, ProtocolSpec(preset=name), out)
    return resolved


def _greedy_copies(loaded: LoadedSpec, name: str, protocol: ProtocolSpec, out: list[Diagnostic]) -> None:
    """Greedy decoding with n > 1 gives n copies of one answer (each backend decodes it once): pass@k
    over them is pass@1 under another name, best-of-n picks among copies, a group or a pair of
    copies has no spread, and runs per seed repeat one another. Refused, saying so."""
    n = protocol.n or 1
    if (protocol.temperature or 0) > 0 or n == 1:
        return
    written = loaded.spec.protocols[name]
    keys = ("protocols", name, "n") if written.n is not None else ("protocols", name, "temperature") \
        if written.temperature is not None else ("protocols", name)
    out.append(loaded.diagnostic(
        keys, f"protocol `{name}` asks for n={n} samples with greedy decoding (temperature 0): they are {n} copies of "
        "one answer, so pass@k over them is pass@1, best-of-n and sample pairs choose among copies, and GRPO "
        "groups of copies have no advantage",
        f"set `temperature:` above 0 (e.g. `preset: passk_10`) to draw {n} samples, or `n: 1` for greedy",
        at_value=keys[-1] != name))


GROUP_KINDS = (PhaseKind.grpo, PhaseKind.repair)


def _rollout_groups(loaded: LoadedSpec, protocols: dict[str, ProtocolSpec], out: list[Diagnostic]) -> None:
    """GRPO's advantage is a sample's reward against its group's (the rollout's n samples of one
    problem): a group of one has none. trl refuses it; verl takes the raw reward as the advantage,
    which is REINFORCE without a baseline, not the GRPO the spec declares."""
    spec = loaded.spec
    units = [(("phases", n), p, p.kind) for n, p in spec.phases.items()]
    units += [(("variants", n), v, spec.phases[v.phase].kind) for n, v in spec.variants.items() if v.phase in spec.phases]
    seen: set[str] = set()
    for where, unit, kind in units:
        rollout = unit.rollout or (spec.phases[unit.phase].rollout if isinstance(unit, VariantSpec) else None)
        protocol = protocols.get(rollout) if rollout else None
        if kind not in GROUP_KINDS or protocol is None or protocol.n != 1 or rollout in seen:
            continue
        seen.add(rollout)
        written = rollout in spec.protocols and spec.protocols[rollout].n is not None
        keys = ("protocols", rollout, "n") if written else (*where, "rollout")
        out.append(loaded.diagnostic(
            keys, f"rollout `{rollout}` draws n=1 sample per problem for {kind.value}: a group of one sample has "
            "no advantage (trl refuses it; verl would train on raw rewards, without GRPO's group baseline)",
            f"set `n:` of protocol `{rollout}` to 2 or more (4 to 16 is usual)", at_value=written))


def find_file(loaded: LoadedSpec, registry: Registry, written: str) -> Optional[Path]:
    """A path written in a spec: absolute, or relative to the spec's folder, else to the project root."""
    candidate = Path(written)
    if candidate.is_absolute():
        return candidate if exists(candidate) else None
    for base in (loaded.path.resolve().parent, registry.project_root):
        if exists(base / candidate):
            return (base / candidate).resolve()
    return None


def _read_idlist(loaded: LoadedSpec, name: str, path: Path, out: list[Diagnostic]) -> Optional[bytes]:
    keys = ("datasets", name, "ids")
    data = path.read_bytes()
    lines = data.decode("utf-8", errors="replace").splitlines()
    if not any(line.strip() for line in lines):
        out.append(loaded.diagnostic(keys, f"id list {path} is empty", "write one problem id per line", at_value=True))
        return None
    if any(not line.strip() for line in lines):
        blank = next(i for i, line in enumerate(lines, 1) if not line.strip())
        out.append(loaded.diagnostic(keys, f"id list {path} has a blank line ({blank})",
                                     "remove blank lines: one problem id per line", at_value=True))
        return None
    repeated = sorted({line for line in lines if lines.count(line) > 1})
    if repeated:
        out.append(loaded.diagnostic(keys, f"id list {path} repeats ids: {', '.join(repeated[:5])}",
                                     "list each problem id once", at_value=True))
        return None
    return data


def _dataset(loaded: LoadedSpec, registry: Registry, name: str, ds: DatasetSpec, res: Resolution) -> DatasetSpec:
    out = res.diagnostics
    source = registry.datasets.get(ds.source)
    if source is None:
        out.append(loaded.diagnostic(
            ("datasets", name, "source"), f"unknown dataset source {ds.source!r}{did_you_mean(ds.source, registry.datasets)}",
            f"use a source from registry/datasets.yaml ({', '.join(sorted(registry.datasets))})", at_value=True))
        return ds
    res.sources[name] = source
    update: dict[str, object] = {}
    if source.local is not None:
        if ds.path is None:
            out.append(loaded.diagnostic(("datasets", name), f"source {ds.source!r} reads a local file but no `path:` is given",
                                         f"add `path: <your .{source.local} file>`"))
        elif find_file(loaded, registry, ds.path) is None:
            out.append(loaded.diagnostic(("datasets", name, "path"), f"file {ds.path!r} not found",
                                         "give a path relative to the spec's folder or the project root", at_value=True))
    else:
        split = ds.split or source.default_split
        if split not in source.splits:
            out.append(loaded.diagnostic(
                ("datasets", name, "split"), f"{ds.source} has no split {split!r}{did_you_mean(split, source.splits)}",
                f"use one of: {', '.join(source.splits)}", at_value=True))
        else:
            update = {"split": split, "test_only": ds.test_only or source.splits[split].test_only}
    if ds.ids is not None:
        _idlist(loaded, registry, name, ds.ids, res)
    res.dataset_fingerprints[name] = res.idlist_hashes.get(name) or _fingerprint(ds, source, update.get("split"))
    return ds.model_copy(update=update)


def _idlist(loaded: LoadedSpec, registry: Registry, name: str, written: str, res: Resolution) -> None:
    path = find_file(loaded, registry, written)
    if path is None or not exists(path, kind="file"):
        res.diagnostics.append(loaded.diagnostic(
            ("datasets", name, "ids"), f"id list {written!r} not found",
            "give a path relative to the spec's folder or the project root, e.g. registry/idlists/<name>.txt "
            "(`rlvr-run data idlist` writes one)", at_value=True))
        return
    data = _read_idlist(loaded, name, path, res.diagnostics)
    if data is not None:
        res.idlist_hashes[name] = _sha256(data)
        res.idlist_paths[name] = path


def _fingerprint(ds: DatasetSpec, source: DatasetSource, split: object) -> str:
    """What pins a dataset without an id list: its source, split and the registry's pinned revision."""
    pinned = {"source": ds.source, "hf_id": source.hf_id, "hf_config": source.hf_config,
              "revision": source.revision, "split": split, "path": ds.path}
    return _sha256(json.dumps(pinned, sort_keys=True).encode())


def resolve(loaded: LoadedSpec, registry: Registry) -> Resolution:
    """The spec with registry names filled in; problems are in `.diagnostics` (not raised)."""
    res = Resolution(spec=loaded.spec)
    model = _model(loaded, registry, res.diagnostics)
    protocols = _protocols(loaded, registry, res.diagnostics)
    _rollout_groups(loaded, protocols, res.diagnostics)
    datasets = {name: _dataset(loaded, registry, name, ds, res) for name, ds in loaded.spec.datasets.items()}
    res.spec = loaded.spec.model_copy(update={"base_model": model, "protocols": protocols, "datasets": datasets})
    return res
