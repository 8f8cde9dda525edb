"""The vLLM the contract tests run against is the one the `gpu` extra installs: verl[vllm]'s pin
(verl's METADATA). A verl upgrade that moves vLLM fails here, naming what to check again."""

from __future__ import annotations

from importlib.metadata import distribution

from packaging.requirements import Requirement

from tests.evaluate.conftest import vllm_source


def verl_vllm_pin() -> str:
    """The exact vLLM version verl's `vllm` extra requires."""
    for line in distribution("verl").requires or []:
        requirement = Requirement(line)
        if requirement.name == "vllm" and requirement.marker and requirement.marker.evaluate({"extra": "vllm"}):
            [spec] = list(requirement.specifier)
            assert spec.operator == "==", f"verl[vllm] no longer pins one vLLM: {line}"
            return spec.version
    raise AssertionError("verl's METADATA has no vllm requirement under its `vllm` extra")


def test_the_contract_runs_against_the_vllm_verl_pins(vllm_root):
    pinned, tested = verl_vllm_pin(), vllm_source.installed_version(vllm_root)
    assert pinned == vllm_source.VERSION == tested, (
        f"verl[vllm] pins vllm=={pinned}, the vLLM contract tests ran against {tested} "
        f"(tests/fakes/vllm_source.py VERSION {vllm_source.VERSION}).\n"
        "  re-check against the new vLLM's source, then set VERSION: SamplingParams' validation (greedy with "
        "n > 1, temperature and stop bounds) and output_kind; LLMEngine.add_request's inputs (engine inputs "
        "vs raw prompts) and its n > 1 fan-out (ParentRequest, child seeds seed + index); the output "
        "processor's FINAL_ONLY aggregation; FinishReason values; the engine core's child process and "
        "shutdown(); the start-up memory check; the compile cache's cache_dir; tests/fakes/vllm's fake of "
        "the forward pass")
