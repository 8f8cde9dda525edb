"""An eval phase that names an endpoint: the model is served elsewhere (here: a real OpenAI-compatible
server on loopback), the key comes from the environment and lands in no file, and the endpoint
and its served model are part of the run's identity."""

from __future__ import annotations

import sys
from pathlib import Path

from engine.evaluate.records import SampleRecord, read
from engine.runs.lineage import RunState
from engine.runs.pipeline import run_spec
from engine.runs.preflight import preflight

sys.path.insert(0, str(Path(__file__).parent))
from openai_server import Server  # noqa: E402

SPEC = """\
name: hosted
base_model: {{path: {model}}}
datasets:
  toy_train: {{source: toy, split: train, role: train}}
  toy_valid: {{source: toy, split: valid, role: valid}}
protocols:
  greedy: {{preset: greedy, max_tokens: 16}}
phases:
  served:
    kind: eval
    endpoint: {{base_url: "{url}", model: {served}, api_key_env: RLVR_TEST_ENDPOINT_KEY, concurrency: 8}}
seeds: [1]
evaluate:
  every_phase: {{datasets: [toy_valid], protocol: greedy}}
"""
KEY = "sk-test-never-written-7f3a"


def write(root: Path, model: Path, url: str, served: str = "coder-7b") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "spec.yaml").write_text(SPEC.format(model=model, url=url, served=served))
    return root / "spec.yaml"


def test_the_endpoint_and_its_model_are_the_run_key(tiny_model, tmp_path):
    one = preflight(write(tmp_path / "a", tiny_model, "http://127.0.0.1:9/v1")).plan.runs[0]
    other_model = preflight(write(tmp_path / "b", tiny_model, "http://127.0.0.1:9/v1", "coder-14b")).plan.runs[0]
    other_server = preflight(write(tmp_path / "c", tiny_model, "http://10.0.0.1:8000/v1")).plan.runs[0]
    assert len({one.id, other_model.id, other_server.id}) == 3
    assert one.config["endpoint"] == {"base_url": "http://127.0.0.1:9/v1", "model": "coder-7b",
                                      "api_key_env": "RLVR_TEST_ENDPOINT_KEY", "concurrency": 8}


def test_an_endpoint_is_evaluated_with_the_key_from_the_environment_only(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_TEST_ENDPOINT_KEY", KEY)
    with Server(latency=lambda prompt: 0.01) as server:
        spec = write(tmp_path, tiny_model, server.base_url)
        outcome = run_spec(spec, runs_dir=tmp_path / "runs")
        [run] = outcome.plan.runs
        assert outcome.result.states[run.id] is RunState.succeeded
        assert server.keys == {KEY} and server.requests == 42 and server.most_in_flight <= 8
    samples = list(read(tmp_path / "runs" / "hosted" / run.id / "outputs" / "samples" / "toy_valid.jsonl", SampleRecord))
    assert len(samples) == 42 and {s.keys.model for s in samples} == {f"{server.base_url}#coder-7b"}
    written = [p for p in tmp_path.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert written == []


def test_credentials_in_the_endpoint_url_are_refused(tiny_model, tmp_path):
    """The URL is the run's identity (config.yaml, every record, the logs): a secret in it leaks."""
    import pytest

    from engine.errors import UserError

    with pytest.raises(UserError, match="holds credentials") as refused:
        preflight(write(tmp_path, tiny_model, f"https://user:{KEY}@api.example.com/v1"))
    assert "api_key_env" in str(refused.value)
    assert not (tmp_path / "runs").exists()
