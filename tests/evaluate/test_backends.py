"""Generation backends on the locally built tiny model: hf directly, and openai through a real
OpenAI-compatible server on loopback serving the same model."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from engine.errors import UserError
from engine.evaluate.backends import make_backend
from engine.evaluate.backends.base import Decoding

sys.path.insert(0, str(Path(__file__).parent))
from openai_server import Server  # noqa: E402

CHAT = [{"role": "user", "content": "Write a function add(a, b)."}]


def test_hf_batched_equals_one_at_a_time_and_counts_tokens(tiny_model):
    backend = make_backend("hf", model=str(tiny_model), batch_size=4)
    prompts = [CHAT, "def add(a, b):", [{"role": "user", "content": "hello"}]]
    greedy = Decoding(max_tokens=12)
    batched = backend.generate(prompts, greedy)
    single = [backend.generate([p], greedy)[0] for p in prompts]
    assert [g[0].text for g in batched] == [g[0].text for g in single]
    for [g] in batched:
        assert 0 < g.completion_tokens <= 12 and g.prompt_tokens > 0 and g.seed == 0
        assert g.finish_reason == ("length" if g.completion_tokens == 12 else "stop")


def test_hf_samples_n_per_prompt(tiny_model):
    backend = make_backend("hf", model=str(tiny_model))
    out = backend.generate([CHAT, CHAT], Decoding(temperature=1.0, n=3, max_tokens=8, seed=7))
    assert [len(g) for g in out] == [3, 3]
    assert len({g.text for g in out[0]}) > 1  # sampled, not copies


def test_openai_backend_against_a_real_loopback_server(tiny_model):
    with Server(str(tiny_model), fail_first=2) as server:
        backend = make_backend("openai", model="tiny", base_url=server.base_url, backoff_s=0.01)
        out = backend.generate([CHAT, "def add(a, b):"], Decoding(max_tokens=10, n=2, temperature=1.0))
        assert server.requests == 4  # two 503s retried with backoff, then both prompts answered
    direct = make_backend("hf", model=str(tiny_model)).generate([CHAT], Decoding(max_tokens=10))
    assert [len(g) for g in out] == [2, 2] and all(g.finish_reason in ("stop", "length") for g in out[0])
    with Server(str(tiny_model)) as server:
        [[same]] = make_backend("openai", model="tiny", base_url=server.base_url).generate([CHAT], Decoding(max_tokens=10))
    assert same.text == direct[0][0].text  # the server really generates with the model


def test_a_server_that_never_recovers_gives_explicit_errors(tiny_model):
    with Server(str(tiny_model), always_fail=True) as server:
        backend = make_backend("openai", model="tiny", base_url=server.base_url, retries=2, backoff_s=0.01)
        [[g, h]] = backend.generate([CHAT], Decoding(n=2))
    assert g.finish_reason == h.finish_reason == "error" and "HTTP 500" in g.error and g.text == ""


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_missing_names_the_gpu_extra():
    with pytest.raises(UserError, match=r"gpu extra"):
        make_backend("vllm", model="m")


def test_openai_counts_a_prompt_once_for_its_n_samples(tiny_model):
    [[one]] = make_backend("hf", model=str(tiny_model)).generate([CHAT], Decoding(max_tokens=4))
    with Server(str(tiny_model)) as server:
        [gens] = make_backend("openai", model="tiny", base_url=server.base_url).generate(
            [CHAT], Decoding(max_tokens=4, n=3, temperature=1.0))
    assert len(gens) == 3 and sum(g.prompt_tokens for g in gens) == one.prompt_tokens


class _FakeLLM:
    """A fake of vllm.LLM (vLLM needs a GPU): records what it is asked to generate from."""

    asked: list = []

    def __init__(self, **_: object) -> None:
        pass

    def get_tokenizer(self):
        class Tokenizer:
            def apply_chat_template(self, messages, tokenize, add_generation_prompt):
                return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"
        return Tokenizer()

    def generate(self, prompts, params, use_tqdm):
        _FakeLLM.asked = list(prompts)
        out = type("Choice", (), {"text": "x", "token_ids": [1], "finish_reason": "stop"})
        return [type("Output", (), {"prompt_token_ids": [0] * 4, "outputs": [out] * params.n})() for _ in prompts]

    def chat(self, prompts, params, use_tqdm):
        raise AssertionError("a mixed batch is not all chat")


def test_vllm_renders_chat_messages_of_a_mixed_batch_with_the_chat_template(monkeypatch):
    import types

    fake = types.ModuleType("vllm")
    fake.LLM = _FakeLLM
    fake.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    backend = make_backend("vllm", model="m")
    out = backend.generate(["def add(a, b):", CHAT], Decoding(n=2))
    assert _FakeLLM.asked == ["def add(a, b):", "<user>Write a function add(a, b).<assistant>"]
    assert [sum(g.prompt_tokens for g in gens) for gens in out] == [4, 4]
