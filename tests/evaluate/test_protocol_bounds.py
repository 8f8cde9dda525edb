"""What a protocol may say is what every backend honours alike: vLLM refuses temperature above 2
and an empty stop string, so the spec does, before anything runs (greedy with n > 1 is allowed:
one sample repeated n times on every backend)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engine.spec.model import ProtocolSpec


@pytest.mark.parametrize("field", [{"temperature": 2.5}, {"stop": ["```", ""]}, {"top_k": -2}])
def test_what_vllm_refuses_is_refused_at_validate(field):
    with pytest.raises(ValidationError):
        ProtocolSpec(**field)


def test_the_bounds_themselves_pass():
    ProtocolSpec(temperature=2.0, stop=["```"], top_k=-1, n=4)
    ProtocolSpec(temperature=0.0, n=4)  # greedy with n > 1: one sample, repeated
