"""What every spec model shares: the strict base class, seeds, scalar settings, the error type of their checks."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

Scalar = Union[str, int, float, bool, None]
# The error type of the models' own checks (PydanticCustomError(SPEC_ADVICE, message, {"fix": ...})):
# reported in their words with their fix, never echoing the value (it may be a secret).
SPEC_ADVICE = "spec_advice"


# numpy seeds only 0..2**32-1, and every trainer seeds numpy with the run's seed.
SEED_MAX = 2**32 - 1


def _seed_range(value: int) -> int:
    if not 0 <= value <= SEED_MAX:
        shown = str(value) if len(str(value)) <= 24 else str(value)[:21] + "..."
        raise PydanticCustomError(SPEC_ADVICE, "seed {seed} is outside 0..4294967295, the seeds numpy (which the "
                                  "trainers seed) accepts", {"seed": shown, "fix": "use a seed from 0 to 4294967295"})
    return value


# strict: `true` or `1.5` is not a seed
Seed = Annotated[int, Field(strict=True), AfterValidator(_seed_range)]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
