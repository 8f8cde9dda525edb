"""What a protocol may say is what every backend honours alike: vLLM refuses temperature above 2
and an empty stop string, so the spec does, before anything runs (greedy with n > 1 is allowed:
a backend decodes it once and repeats it, but a protocol asking for it is refused: its n
"samples" would be copies, and pass@k over them pass@1 by another name)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engine.errors import SpecError
from engine.isolation.validate import validate_spec
from engine.spec.model import ProtocolSpec

SPEC = """\
name: greedy-copies
base_model: tiny-coder
datasets:
  toy_test: {{source: toy, split: test, role: test}}
protocols:
  main: {protocol}
phases:
  base: {{kind: eval, evaluate: [toy_test], protocol: main}}
seeds: [1]
"""


@pytest.mark.parametrize("field", [{"temperature": 2.5}, {"stop": ["```", ""]}, {"top_k": -2}])
def test_what_vllm_refuses_is_refused_at_validate(field):
    with pytest.raises(ValidationError):
        ProtocolSpec(**field)


def test_the_bounds_themselves_pass():
    ProtocolSpec(temperature=2.0, stop=["```"], top_k=-1, n=4)
    ProtocolSpec(temperature=0.0, n=4)  # the field bounds: greedy n > 1 is refused once resolved


@pytest.mark.parametrize("protocol, where", [("{temperature: 0.0, n: 10, max_tokens: 64}", "protocols.main.n"),
                                             ("{n: 4, max_tokens: 64}", "protocols.main.n"),
                                             ("{preset: passk_10, temperature: 0}", "protocols.main.temperature")])
def test_greedy_with_n_is_refused_at_validate_saying_why(tmp_path, protocol, where):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(protocol=protocol))
    with pytest.raises(SpecError) as caught:
        validate_spec(spec, content=False)
    [d] = [d for d in caught.value.diagnostics if "greedy" in d.message]
    assert d.path == where and "pass@k over them is pass@1" in d.message and "temperature" in d.fix


def test_greedy_of_one_and_sampling_with_n_pass(tmp_path):
    for protocol in ("{temperature: 0.0, n: 1, max_tokens: 64}", "{preset: passk_10}"):
        spec = tmp_path / "spec.yaml"
        spec.write_text(SPEC.format(protocol=protocol))
        validate_spec(spec, content=False)
