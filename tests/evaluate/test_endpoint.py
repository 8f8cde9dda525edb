"""An eval phase that names an endpoint: the model is served elsewhere (here: a real OpenAI-compatible
server on loopback), the key comes from the environment and lands in no file, and the served model
is the run's identity, not the address it is served at: records are keyed by what it serves (its
name and the fingerprint of its greedy answers to fixed probes), so a server restarted on another
port resumes a run without asking again, and other weights under the same name never resume."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engine.evaluate.backends.openai import PROBES, OpenAIBackend
from engine.evaluate.eval_run import Settings, evaluate_run
from engine.evaluate.records import GenerationRecord, SampleRecord, read
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


def test_the_served_model_is_the_run_key_and_its_address_is_not(tiny_model, tmp_path):
    one = preflight(write(tmp_path / "a", tiny_model, "http://127.0.0.1:9/v1")).plan.runs[0]
    other_model = preflight(write(tmp_path / "b", tiny_model, "http://127.0.0.1:9/v1", "coder-14b")).plan.runs[0]
    other_server = preflight(write(tmp_path / "c", tiny_model, "http://10.0.0.1:8000/v1")).plan.runs[0]
    assert one.id != other_model.id
    assert one.id == other_server.id  # the same model restarted elsewhere: the same run
    assert one.config["endpoint"] == {"base_url": "http://127.0.0.1:9/v1", "model": "coder-7b",
                                      "api_key_env": "RLVR_TEST_ENDPOINT_KEY", "concurrency": 8}


@pytest.mark.slow  # tens of seconds (a real study, server or trainer): `make test-all` and CI run it
def test_an_endpoint_is_evaluated_with_the_key_from_the_environment_only(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_TEST_ENDPOINT_KEY", KEY)
    with Server(latency=lambda prompt: 0.01, served=["coder-7b"]) as server:
        spec = write(tmp_path, tiny_model, server.base_url)
        outcome = run_spec(spec, runs_dir=tmp_path / "runs")
        [run] = outcome.plan.runs
        assert outcome.result.states[run.id] is RunState.succeeded
        # 42 answers and the 3 probes that tell what the server serves
        assert server.keys == {KEY} and server.requests == 42 + len(PROBES) and server.most_in_flight <= 8
        served = f"served:coder-7b@{_fingerprint(server)}"
    outputs = tmp_path / "runs" / "hosted" / run.id / "outputs"
    samples = list(read(outputs / "samples" / "toy_valid.jsonl", SampleRecord))
    assert len(samples) == 42 and {s.keys.model for s in samples} == {served}
    written = [p for p in tmp_path.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert written == []


def test_credentials_in_the_endpoint_url_are_refused(tiny_model, tmp_path):
    """The URL is the run's identity (config.yaml, every record, the logs): a secret in it leaks."""

    from engine.errors import UserError

    with pytest.raises(UserError, match="holds credentials") as refused:
        preflight(write(tmp_path, tiny_model, f"https://user:{KEY}@api.example.com/v1"))
    assert "api_key_env" in str(refused.value)
    assert not (tmp_path / "runs").exists()


def _fingerprint(server: Server, chat: bool = True) -> str:
    return OpenAIBackend(model="coder-7b", base_url=server.base_url).fingerprint(chat)


def _killed_halfway(run_dir: Path, keep: int) -> None:
    """What a kill leaves: the first `keep` records of each file, no metrics."""
    for name in ("generations", "samples"):
        path = run_dir / "outputs" / name / "toy_valid.jsonl"
        path.write_text("".join(path.read_text().splitlines(keepends=True)[:keep]))
    (run_dir / "outputs" / "metrics.json").unlink()


@pytest.mark.slow  # tens of seconds (a real study, server or trainer): `make test-all` and CI run it
def test_a_served_model_restarted_on_another_port_resumes_and_other_weights_never_do(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_TEST_ENDPOINT_KEY", KEY)
    with Server(served=["coder-7b"]) as first:
        outcome = run_spec(write(tmp_path, tiny_model, first.base_url), runs_dir=tmp_path / "runs")
        [run] = outcome.plan.runs
        served = f"served:coder-7b@{_fingerprint(first)}"
    run_dir = tmp_path / "runs" / "hosted" / run.id
    _killed_halfway(run_dir, keep=20)
    with Server(served=["coder-7b"]) as restarted:  # the same weights, another port
        assert restarted.base_url != first.base_url
        evaluate_run(run_dir, "coder-7b", Settings(base_url=restarted.base_url))
        assert restarted.requests == len(PROBES) + 22  # the 20 recorded answers are not asked again
    samples = list(read(run_dir / "outputs" / "samples" / "toy_valid.jsonl", SampleRecord))
    assert len(samples) == 42 and {s.keys.model for s in samples} == {served}
    with Server(served=["coder-7b"], answer="def f():\n    return 1") as other:  # other weights, the same name
        evaluate_run(run_dir, "coder-7b", Settings(base_url=other.base_url))
        assert other.requests == len(PROBES) + 42  # nothing of the old weights' records resumed
    lines = (run_dir / "outputs" / "generations" / "toy_valid.jsonl").read_text().splitlines()
    keys = [GenerationRecord.model_validate_json(line).keys.model for line in lines]
    assert len(keys) == 84 and keys.count(served) == 42  # each weights' answers under their own key


@pytest.mark.slow  # tens of seconds (a real study, server or trainer): `make test-all` and CI run it
def test_a_spec_edited_to_the_restarted_servers_address_resumes_the_same_run(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_TEST_ENDPOINT_KEY", KEY)
    with Server(always_fail=True, served=["coder-7b"]) as down:
        failed = run_spec(write(tmp_path, tiny_model, down.base_url), runs_dir=tmp_path / "runs")
        [run] = failed.plan.runs
        assert failed.result.states[run.id] is RunState.failed
    with Server(served=["coder-7b"]) as up:
        again = run_spec(write(tmp_path, tiny_model, up.base_url), runs_dir=tmp_path / "runs")
        assert [r.id for r in again.plan.runs] == [run.id] and again.result.states[run.id] is RunState.succeeded
        assert up.base_url in (tmp_path / "runs" / "hosted" / run.id / "config.yaml").read_text()


@pytest.mark.slow  # tens of seconds (a real study, server or trainer): `make test-all` and CI run it
def test_a_pinned_fingerprint_refuses_other_weights_served_under_the_name(tiny_model, tmp_path, monkeypatch):

    from engine.errors import UserError

    monkeypatch.setenv("RLVR_TEST_ENDPOINT_KEY", KEY)
    with Server(served=["coder-7b"]) as server:
        pinned = _fingerprint(server)
        spec = write(tmp_path, tiny_model, server.base_url)
        spec.write_text(spec.read_text().replace("concurrency: 8}", "concurrency: 8, fingerprint: 0123456789abcdef}"))
        outcome = run_spec(spec, runs_dir=tmp_path / "runs")
        [run] = outcome.plan.runs
        assert outcome.result.states[run.id] is RunState.failed
        log = "".join(p.read_text() for p in (tmp_path / "runs" / "hosted" / run.id / "logs").glob("attempt-*.log"))
        assert f"fingerprint {pinned}, but the endpoint pins 0123456789abcdef" in log
        assert server.requests == 2 * len(PROBES)  # ours and the run's probes: not a single answer asked
    with Server(served=["other"]) as elsewhere, pytest.raises(UserError, match="not 'coder-7b'"):
        OpenAIBackend(model="coder-7b", base_url=elsewhere.base_url).fingerprint(True)
