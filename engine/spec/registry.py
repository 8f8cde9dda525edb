"""The declarative catalogs under registry/: dataset sources, models, decoding presets, prompts.

A spec names registry entries (`source: humaneval`, `base_model: qwen2.5-coder-7b-instruct`,
`preset: greedy`) or spells everything out; `engine.spec.resolve` fills the gaps from here.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, model_validator

from engine.errors import UserError
from engine.resources import shipped
from engine.spec.base import StrictModel
from engine.spec.load import ParsedYaml, load_model_file
from engine.spec.model import ProtocolSpec, ResponsePrior, Role

LocalFormat = Literal["jsonl", "json", "parquet"]


class SplitEntry(StrictModel):
    size: Optional[int] = Field(default=None, ge=0)  # problems in the split, when known
    roles: list[Role]  # roles a spec may give a dataset drawn from this split
    test_only: bool = False  # evaluation-only benchmark: final evaluation and nothing else
    # The publisher fixed this split's membership, so it is a frozen set of problems
    # by itself (isolation rule 4); otherwise evaluation needs an `ids:` list.
    fixed: bool = False
    hf_split: Optional[str] = None  # the split's name in the HF dataset, when it differs
    id_range: Optional[str] = None  # ids the split holds, in words (e.g. MBPP test: 11..510)


class DatasetSource(StrictModel):
    description: str
    license: str
    id_field: str  # the record field that identifies a problem
    url: Optional[str] = None
    hf_id: Optional[str] = None
    hf_config: Optional[str] = None
    revision: Optional[str] = None  # pinned dataset revision (part of the split's fingerprint)
    streaming: bool = False  # large: stream from the hub rather than download whole
    offline: Optional[str] = None  # where the offline copy comes from, in words
    local: Optional[LocalFormat] = None  # a generic local file format; the spec gives `path:`
    default_split: Optional[str] = None
    splits: dict[str, SplitEntry] = Field(default_factory=dict)
    roles: list[Role] = Field(default_factory=list)  # roles of local sources (which have no splits)


class TinyBuild(StrictModel):
    """A model built locally on first use (random init, a tokenizer trained here): no hub needed."""

    hidden: int = Field(gt=0)
    layers: int = Field(gt=0)
    heads: int = Field(default=4, gt=0)
    kv_heads: int = Field(default=2, gt=0)
    vocab_size: int = Field(default=1024, gt=256)
    seed: int = 0

    def folder(self, name: str) -> str:
        """Where it is built: under the rlvr-run cache, named by its settings (a changed build is a new model).

        Written with `~` when the cache is the default one, so run ids do not depend on the home folder."""
        digest = hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:12]
        root = os.environ.get("RLVR_RUN_CACHE_DIR") or "~/.cache/rlvr-run"
        return f"{root}/models/{name}-{digest}"


class ModelEntry(StrictModel):
    hf_id: Optional[str] = None
    build: Optional[TinyBuild] = None  # instead of hf_id: built locally (engine.tinymodel)
    family: str
    chat: bool
    params_b: float = Field(gt=0)
    license: str
    context_len: int = Field(gt=0)
    # the response lengths the forecast assumes for this model (absent: the hardware file's default)
    response_tokens: Optional[ResponsePrior] = None

    @model_validator(mode="after")
    def _one_source(self) -> "ModelEntry":
        if (self.hf_id is None) == (self.build is None):
            raise ValueError("a model has either `hf_id` (the hub) or `build` (built locally), not both or neither")
        return self


class PromptEntry(StrictModel):
    """A Jinja prompt template (rendered by `engine.prompts.templates`)."""

    description: str = ""
    template: str  # the user message (style chat) or the whole prompt text (style completion)
    style: Literal["chat", "completion"] = "chat"
    system: Optional[str] = None  # the system message of a chat prompt
    kind: Optional[Literal["function", "stdio"]] = None  # problems it fits; None: any
    # The answer format the prompt asks for, checked by `engine.prompts.templates.check_format`:
    # fenced: one ```python block; code: bare code (completion); think_fenced: <think>…</think> then a block.
    answer: Literal["fenced", "code", "think_fenced"] = "fenced"
    response: Optional[str] = None  # Jinja template of a reference answer (SFT target); None: by `answer`
    # Selectors this template is the default for: "KIND/STYLE" or "KIND/STYLE/FAMILY" (e.g. "stdio/chat").
    default_for: list[str] = Field(default_factory=list)


class DatasetsFile(StrictModel):
    datasets: dict[str, DatasetSource]


class ModelsFile(StrictModel):
    models: dict[str, ModelEntry]


class ProtocolsFile(StrictModel):
    defaults: ProtocolSpec  # every field a resolved protocol must have
    presets: dict[str, ProtocolSpec]


class PromptsFile(StrictModel):
    prompts: dict[str, PromptEntry] = Field(default_factory=dict)


@dataclass(kw_only=True)
class Registry:
    root: Path
    datasets: dict[str, DatasetSource]
    models: dict[str, ModelEntry]
    protocol_defaults: ProtocolSpec
    protocols: dict[str, ProtocolSpec]  # named presets
    prompts: dict[str, PromptEntry]
    files: dict[str, ParsedYaml]  # catalog name → its file, for located diagnostics

    def model(self, name: str) -> ModelEntry:
        """The model entry called `name`, or a UserError listing the known ones."""
        if name not in self.models:
            raise UserError(f"unknown model `{name}`; registry/models.yaml has: {', '.join(self.models)}")
        return self.models[name]

    @property
    def project_root(self) -> Path:
        """Where relative paths such as `registry/idlists/x.txt` are anchored."""
        return self.root.parent


def project_registry() -> Path:
    return shipped("registry")


def find_registry(start: Optional[Path]) -> Path:
    """The nearest `registry/` walking up from `start`, else the project's own."""
    if start is not None:
        here = Path(start).resolve()
        for folder in (here, *here.parents):
            if (folder / "registry" / "datasets.yaml").is_file():
                return folder / "registry"
    return project_registry()


def load_registry(root: Optional[Path] = None) -> Registry:
    """Read registry/*.yaml; raises SpecError with located problems in any catalog."""
    root = Path(root) if root is not None else project_registry()
    datasets, f_datasets = load_model_file(root / "datasets.yaml", DatasetsFile)
    models, f_models = load_model_file(root / "models.yaml", ModelsFile)
    protocols, f_protocols = load_model_file(root / "protocols.yaml", ProtocolsFile)
    prompts, f_prompts = load_model_file(root / "prompts.yaml", PromptsFile)
    return Registry(root=root, datasets=datasets.datasets, models=models.models,
                    protocol_defaults=protocols.defaults, protocols=protocols.presets,
                    prompts=prompts.prompts,
                    files={"datasets": f_datasets, "models": f_models,
                           "protocols": f_protocols, "prompts": f_prompts})
