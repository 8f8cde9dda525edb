"""The base of records that many commands import and few build."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """A pydantic model whose validator is built on first use, not at import: pydantic spends
    ~10 ms building each model, and `rlvr-run status` imports every lineage row to read two."""

    model_config = ConfigDict(defer_build=True)
