"""Generation backends: hf on the locally built tiny model; openai through a real OpenAI-compatible
server on loopback (serving the same model, or canned answers with chosen latencies); vllm and
data-parallel engines through the real vLLM's Python source with a FAKE GPU forward pass
(tests/fakes/vllm: no GPU here) that records call shapes."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest

from engine.errors import UserError
from engine.evaluate.backends import (
    Endpoint,
    GenerationSettings,
    engine_shape,
    make_generator,
    open_generator,
)
from engine.evaluate.backends.base import Decoding, Request, generate

sys.path.insert(0, str(Path(__file__).parent))
from openai_server import Server  # noqa: E402

CHAT = [{"role": "user", "content": "Write a function add(a, b)."}]


def test_hf_batched_equals_one_at_a_time_and_counts_tokens(tiny_model):
    backend = make_generator("hf", model=str(tiny_model), batch_size=4)
    prompts = [CHAT, "def add(a, b):", [{"role": "user", "content": "hello"}]]
    greedy = Decoding(max_tokens=12)
    batched = generate(backend, prompts, greedy)
    single = [generate(backend, [p], greedy)[0] for p in prompts]
    assert [g[0].text for g in batched] == [g[0].text for g in single]
    for [g] in batched:
        assert 0 < g.completion_tokens <= 12 and g.prompt_tokens > 0 and g.seed == 0
        assert g.finish_reason == ("length" if g.completion_tokens == 12 else "stop")


def test_hf_streams_every_request_in_batches_of_its_batch_size(tiny_model):
    backend = make_generator("hf", model=str(tiny_model), batch_size=4)
    calls = []
    real = backend.model.generate
    backend.model.generate = lambda **kw: calls.append(kw["input_ids"].shape[0]) or real(**kw)
    greedy, sampled = Decoding(max_tokens=4), Decoding(max_tokens=4, temperature=1.0, n=2, seed=3)
    requests = [Request(f"def f{i}(x):" + " x" * i, greedy if i % 3 else sampled) for i in range(10)]
    out = dict(backend.stream(requests))
    assert sorted(out) == list(range(10))
    assert all(len(out[i]) == requests[i].decoding.n for i in range(10))
    # 6 greedy prompts and 4 sampled ones: batches never mix decodings and hold at most 4 prompts
    assert sorted(calls) == [2, 4, 4]


def test_hf_samples_n_per_prompt(tiny_model):
    backend = make_generator("hf", model=str(tiny_model))
    out = generate(backend, [CHAT, CHAT], Decoding(temperature=1.0, n=3, max_tokens=8, seed=7))
    assert [len(g) for g in out] == [3, 3]
    assert len({g.text for g in out[0]}) > 1  # sampled, not copies


def test_openai_backend_against_a_real_loopback_server(tiny_model):
    with Server(str(tiny_model), fail_first=2) as server:
        backend = make_generator("openai", model="tiny", base_url=server.base_url, backoff_s=0.01)
        out = generate(backend, [CHAT, "def add(a, b):"], Decoding(max_tokens=10, n=2, temperature=1.0))
        assert server.requests == 4  # two 503s retried with backoff, then both prompts answered
    direct = generate(make_generator("hf", model=str(tiny_model)), [CHAT], Decoding(max_tokens=10))
    assert [len(g) for g in out] == [2, 2] and all(g.finish_reason in ("stop", "length") for g in out[0])
    with Server(str(tiny_model)) as server:
        [[same]] = generate(make_generator("openai", model="tiny", base_url=server.base_url), [CHAT],
                            Decoding(max_tokens=10))
    assert same.text == direct[0][0].text  # the server really generates with the model


def test_openai_keeps_a_sliding_window_and_yields_answers_as_they_land():
    slow = "prompt 0"  # one slow answer must not hold back the ones sent after it
    with Server(latency=lambda p: 1.0 if p == slow else 0.02) as server:
        backend = make_generator("openai", model="m", base_url=server.base_url, concurrency=4)
        order = [i for i, _ in backend.stream([Request(f"prompt {i}", Decoding()) for i in range(24)])]
        assert server.most_in_flight == 4 and server.requests == 24
    assert sorted(order) == list(range(24)) and order[-1] == 0


def test_a_server_that_never_recovers_gives_explicit_errors():
    with Server(always_fail=True) as server:
        backend = make_generator("openai", model="tiny", base_url=server.base_url, retries=2, backoff_s=0.01)
        [[g, h]] = generate(backend, [CHAT], Decoding(n=2))
    assert g.finish_reason == h.finish_reason == "error" and "HTTP 500" in g.error and g.text == ""


def test_a_server_without_the_neutral_knobs_is_asked_without_them():
    """vLLM's server fills an unsent top_k / repetition_penalty / min_p from the checkpoint, so they
    are sent turned off; OpenAI's API refuses arguments it does not have (and applies no such knob):
    there they are left out. A top_k the protocol sets is never dropped: refused, the request fails."""
    with Server() as server:
        generate(make_generator("openai", model="m", base_url=server.base_url), ["hi"], Decoding())
        assert {k: server.bodies[0][k] for k in ("top_k", "repetition_penalty", "min_p")} == {
            "top_k": -1, "repetition_penalty": 1.0, "min_p": 0.0}
    with Server(refuses=("top_k", "repetition_penalty", "min_p")) as server:
        backend = make_generator("openai", model="m", base_url=server.base_url, backoff_s=0.01)
        [[g]] = generate(backend, ["hi"], Decoding())
        assert g.finish_reason == "stop" and g.error is None
        [[g]] = generate(backend, ["hi"], Decoding())  # known now: asked once
        assert len(server.bodies) == 3 and not {"top_k", "repetition_penalty", "min_p"} & set(server.bodies[-1])
        [[g]] = generate(backend, ["hi"], Decoding(temperature=1.0, top_k=20))
        assert g.finish_reason == "error" and "top_k" in g.error


def test_an_endpoint_reads_its_key_from_the_environment_only(monkeypatch):
    endpoint = Endpoint(base_url="http://127.0.0.1:9/v1", model="served", api_key_env="RLVR_TEST_KEY")
    monkeypatch.delenv("RLVR_TEST_KEY", raising=False)
    with pytest.raises(UserError, match=r"\$RLVR_TEST_KEY.*\n  fix: export RLVR_TEST_KEY="):
        engine_shape(GenerationSettings(endpoint=endpoint), "ignored", [])
    monkeypatch.setenv("RLVR_TEST_KEY", "sk-secret")
    with Server() as server:
        endpoint = Endpoint(base_url=server.base_url, model="served", api_key_env="RLVR_TEST_KEY", concurrency=3)
        shape = engine_shape(GenerationSettings(endpoint=endpoint), "ignored", ["0", "1"])
        assert (shape.backend, shape.engines, shape.options["model"]) == ("openai", 1, "served")
        generate(open_generator(shape), ["hi"], Decoding())
        assert server.keys == {"sk-secret"}
    assert "sk-secret" not in repr(endpoint)


def test_vllm_missing_names_the_gpu_extra(monkeypatch):
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(UserError, match=r"gpu extra"):
        make_generator("vllm", model="m")


def test_vllm_gets_every_request_in_one_submission_and_yields_each_when_done(fake_vllm, tiny_model):
    backend = make_generator("vllm", model=str(tiny_model), gpu_memory_utilization=0.8)
    requests = [Request(f"problem {i}", Decoding(n=1 + i % 3, max_tokens=16)) for i in range(300)]
    order = [i for i, gens in backend.stream(requests) if len(gens) == requests[i].decoding.n]
    events = fake_vllm()
    [load] = [e for e in events if e["event"] == "load"]
    assert (load["tensor_parallel_size"], load["gpu_memory_utilization"]) == (1, 0.8)
    steps = [e for e in events if e["event"] == "step"]
    assert steps[0]["running"] + steps[0]["waiting"] == 300  # the engine saw them all at its first step
    assert steps[0]["running"] == 256  # and kept its batch full
    assert sorted(order) == list(range(300)) and order != list(range(300))  # yielded as they finished


def test_vllm_stopped_midway_aborts_what_it_still_holds(fake_vllm, tiny_model):
    backend = make_generator("vllm", model=str(tiny_model))
    stream = backend.stream([Request(f"problem {i}", Decoding()) for i in range(40)])
    taken = [next(stream) for _ in range(5)]
    stream.close()  # the caller was interrupted
    [abort] = [e for e in fake_vllm() if e["event"] == "abort"]
    # the 35 not taken, less those that finished in the step the fifth did (the engine holds them no more)
    assert len(taken) == 5 and 0 < abort["requests"] <= 35
    engine = backend.llm.llm_engine
    assert not engine.has_unfinished_requests() and not engine.engine_core.running and not engine.engine_core.waiting


@pytest.mark.slow
def test_a_model_that_fits_one_gpu_runs_one_engine_per_gpu(fake_vllm, tiny_model):
    """Each worker's engine starts its engine core as a child process, as vLLM does: a daemonic
    worker could not."""
    shape = engine_shape(GenerationSettings(backend="vllm"), str(tiny_model), ["2", "3"])
    assert (shape.engines, shape.tensor_parallel_size, shape.device_groups) == (2, 1, ("2", "3"))
    backend = open_generator(shape)
    try:
        out = dict(backend.stream([Request(f"problem {i}", Decoding(n=2)) for i in range(20)]))
    finally:
        backend.close()
    assert sorted(out) == list(range(20)) and all(len(g) == 2 for g in out.values())
    events = fake_vllm()
    loads = [e for e in events if e["event"] == "load"]
    assert sorted(e["devices"] for e in loads) == ["2", "3"] and len({e["pid"] for e in loads}) == 2
    per_engine = {}
    for e in events:
        if e["event"] == "step":
            per_engine.setdefault(e["pid"], e["running"] + e["waiting"])
    assert sorted(per_engine.values()) == [10, 10]  # each engine got its share in one submission


def test_tensor_parallel_wider_than_the_gpus_given_is_refused(tmp_path):
    with pytest.raises(UserError, match=r"tensor_parallel_size 4 needs 4 GPUs but the evaluation was given 2"):
        engine_shape(GenerationSettings(backend="vllm", tensor_parallel_size=4), str(tmp_path), ["0", "1"])
    shape = engine_shape(GenerationSettings(backend="vllm", tensor_parallel_size=2), str(tmp_path), list("0123"))
    assert (shape.engines, shape.device_groups) == (2, ("0,1", "2,3"))


def test_openai_counts_a_prompt_once_for_its_n_samples(tiny_model):
    [[one]] = generate(make_generator("hf", model=str(tiny_model)), [CHAT], Decoding(max_tokens=4))
    with Server(str(tiny_model)) as server:
        [gens] = generate(make_generator("openai", model="tiny", base_url=server.base_url), [CHAT],
                          Decoding(max_tokens=4, n=3, temperature=1.0))
    assert len(gens) == 3 and sum(g.prompt_tokens for g in gens) == one.prompt_tokens


def test_vllm_sends_token_prompts_rendered_as_hf_renders_them_and_counts_a_prompt_once(fake_vllm, tiny_model):
    backend = make_generator("vllm", model=str(tiny_model))
    out = generate(backend, ["def add(a, b):", CHAT], Decoding(n=2))
    hf = make_generator("hf", model=str(tiny_model))
    added = [e["prompt_token_ids"] for e in fake_vllm() if e["event"] == "add"]
    assert added == [hf.prompt_ids("def add(a, b):"), hf.prompt_ids(CHAT)]
    assert [sum(g.prompt_tokens for g in gens) for gens in out] == [len(ids) for ids in added]
    assert not [e for e in fake_vllm() if e["event"] == "warning"]  # no deprecated raw prompt


@pytest.mark.slow
def test_data_parallel_engines_never_hand_a_stopped_streams_answers_to_the_next(fake_vllm, tiny_model):
    """Grouped evaluations share the engines: answers an earlier caller left behind (it stopped
    early) must not be taken for the next stream's requests of the same index."""
    backend = open_generator(engine_shape(GenerationSettings(backend="vllm"), str(tiny_model), ["0", "1"]))
    try:
        stopped = backend.stream([Request(f"problem {i}", Decoding(n=3)) for i in range(40)])
        next(stopped)
        stopped.close()
        out = list(backend.stream([Request(f"other {i}", Decoding(n=1)) for i in range(20)]))
    finally:
        backend.close()
    assert sorted(i for i, _ in out) == list(range(20)) and all(len(g) == 1 for _, g in out)


def test_a_server_that_ignores_n_gives_no_samples_past_it():
    """Extra choices would become samples past the protocol's n (and, on a resume, overwrite the
    samples after the requested ones)."""
    with Server(choices=5) as server:
        backend = make_generator("openai", model="m", base_url=server.base_url)
        out = dict(backend.stream([Request(f"prompt {i}", Decoding(n=2)) for i in range(3)]))
    assert sorted(out) == [0, 1, 2] and all(len(gens) == 2 for gens in out.values())


def test_hf_decodes_the_protocol_not_the_checkpoints_generation_config(tiny_model, tmp_path):
    """vLLM's engine applies no generation_config default but where to stop; hf would apply them
    all (a Qwen instruct checkpoint ships repetition_penalty and top_k): the protocol must decode alike."""
    import json
    import shutil

    other = tmp_path / "with-defaults"
    shutil.copytree(tiny_model, other)
    config = json.loads((other / "generation_config.json").read_text())
    (other / "generation_config.json").write_text(json.dumps({**config, "_from_model_config": False, "repetition_penalty": 50.0, "top_k": 1,
                                                              "no_repeat_ngram_size": 1}))
    prompts = [CHAT, "def add(a, b):"]
    for decoding in (Decoding(max_tokens=16), Decoding(max_tokens=16, temperature=1.0, seed=3)):
        plain = generate(make_generator("hf", model=str(tiny_model)), prompts, decoding)
        defaults = generate(make_generator("hf", model=str(other)), prompts, decoding)
        assert [g[0].text for g in defaults] == [g[0].text for g in plain]


def test_a_reasoning_servers_answer_is_never_scored_as_an_empty_one(tiny_model):
    """Behind a reasoning parser `content` holds the answer and `reasoning_content` the thinking. A
    sample whose text all went to the thinking, ended by the model (`stop`), has an answer that
    cannot be told from the thinking: a fault of the serving, never an empty answer scored as the
    model's. One cut by max_tokens while thinking stays what it is: a truncated sample."""
    with Server(reasoning=True) as server:
        [[g]] = generate(make_generator("openai", model="m", base_url=server.base_url), [CHAT], Decoding())
    assert g.finish_reason == "error" and "reasoning" in g.error and "no content" in g.error and g.text == ""
    with Server(str(tiny_model), reasoning=True) as server:
        [[g]] = generate(make_generator("openai", model="tiny", base_url=server.base_url), [CHAT],
                         Decoding(max_tokens=4))
    assert g.finish_reason == "length" and g.error is None and g.text == ""
