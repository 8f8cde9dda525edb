"""The vllm backend's use of vLLM, checked against the real vLLM of the version verl pins: its
`SamplingParams` validation, output kinds, parallel-sampling parent request and output processor
run for real; only the GPU forward pass is fake (tests/fakes/vllm, which says what it does as
vLLM 0.24 does)."""

from __future__ import annotations

import json
import multiprocessing
import shutil

import pytest

from engine.errors import UserError
from engine.evaluate.backends import make_generator
from engine.evaluate.backends.base import Decoding, Request, generate

CHAT = [{"role": "user", "content": "Write a function add(a, b)."}]


def test_sampling_params_refuse_what_the_spec_now_refuses(fake_vllm):
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    assert SamplingParams().output_kind is RequestOutputKind.CUMULATIVE  # why the backend sets FINAL_ONLY
    for bad in ({"n": 4, "temperature": 0.0}, {"temperature": 2.5}, {"stop": [""]}):
        with pytest.raises(ValueError):
            SamplingParams(**bad)


def test_n_samples_come_back_whole_each_with_its_own_seed(fake_vllm, tiny_model):
    backend = make_generator("vllm", model=str(tiny_model))
    [gens] = generate(backend, ["def f(x):"], Decoding(n=4, temperature=1.0, seed=11, max_tokens=64))
    assert len(gens) == 4 and all(g.finish_reason == "stop" and g.text for g in gens)
    assert [g.seed for g in gens] == [11, 12, 13, 14]  # vLLM's children: seed + index
    added = [e for e in fake_vllm() if e["event"] == "add"]
    assert sorted(e["seed"] for e in added) == [11, 12, 13, 14] and {e["n"] for e in added} == {1}
    assert gens[0].engine.startswith("vllm 0.24")


def test_the_engines_default_output_kind_keeps_one_sample_in_n(fake_vllm, tiny_model):
    """What the backend guards against: a request added with vLLM's default kind finishes with the
    last child's sample alone."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import tokens_input

    engine = LLM(str(tiny_model)).llm_engine
    engine.add_request("a", tokens_input([5, 6, 7]), SamplingParams(n=4, temperature=1.0, max_tokens=8))
    finished = []
    while engine.has_unfinished_requests():
        finished += [o for o in engine.step() if o.finished]
    assert [len(o.outputs) for o in finished] == [1]


def test_greedy_with_n_is_one_request_repeated(fake_vllm, tiny_model):
    backend = make_generator("vllm", model=str(tiny_model))
    [gens] = generate(backend, [CHAT], Decoding(n=3))
    assert len(gens) == 3 and len({g.text for g in gens}) == 1 and gens[0].finish_reason == "stop"
    [added] = [e for e in fake_vllm() if e["event"] == "add"]
    assert added["n"] == 1
    assert sum(g.prompt_tokens for g in gens) == len(added["prompt_token_ids"])


def test_a_chat_prompt_starts_with_one_bos(fake_vllm, tiny_model, tmp_path):
    """A tokenizer that adds a BOS and a template that writes one (deepseek-coder's): the prompt the
    engine gets has one, as hf and the vLLM server give it."""
    model = tmp_path / "bos-model"
    shutil.copytree(tiny_model, model)
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    bos = {"id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]}
    tokenizer["post_processor"] = {"type": "TemplateProcessing",
                                   "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                              {"Sequence": {"id": "A", "type_id": 0}}],
                                   "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                                   "special_tokens": {"<|endoftext|>": bos}}
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "bos_token": "<|endoftext|>"}))
    template = (model / "chat_template.jinja").read_text()
    (model / "chat_template.jinja").write_text("{{ bos_token }}" + template)
    generate(make_generator("vllm", model=str(model)), [CHAT, "def add(a, b):"], Decoding())
    chat, plain = [e["prompt_token_ids"] for e in fake_vllm() if e["event"] == "add"]
    assert chat[:2] != [0, 0] and chat[0] == 0 and plain[0] == 0 and plain[1] != 0


def test_an_over_long_prompt_fails_alone(fake_vllm, tiny_model):
    backend = make_generator("vllm", model=str(tiny_model))
    out = dict(backend.stream([Request("x " * 400, Decoding(n=2, temperature=1.0)), Request("def f():", Decoding())]))
    assert [g.finish_reason for g in out[0]] == ["error", "error"] and "max_model_len" in out[0][0].error
    assert out[1][0].finish_reason == "stop"


@pytest.mark.parametrize("reason", ["ABORT", "ERROR"])
def test_an_engine_fault_is_a_fault_not_a_wrong_answer(fake_vllm, tiny_model, reason):
    from vllm.v1.engine import FinishReason

    backend = make_generator("vllm", model=str(tiny_model))
    backend.llm.llm_engine.engine_core.finish_with = getattr(FinishReason, reason)
    [gens] = generate(backend, ["def f():"], Decoding(n=2, temperature=1.0))
    assert [g.finish_reason for g in gens] == ["error", "error"] and reason.lower() in gens[0].error


def test_close_shuts_the_engine_core_down(fake_vllm, tiny_model):
    backend = make_generator("vllm", model=str(tiny_model))
    core = backend.llm.llm_engine.engine_core
    backend.close()
    assert not core.process.is_alive() and [e["event"] for e in fake_vllm()].count("shutdown") == 1


@pytest.mark.slow
def test_a_daemonic_worker_cannot_start_the_engine_as_vllm_starts_it(fake_vllm, tiny_model):
    """The fake starts its engine core as vLLM 0.24 does (a child process), so the DataParallel
    workers must not be daemonic: this is what a daemonic one meets."""
    from engine.evaluate.backends import GENERATORS
    from engine.evaluate.backends.parallel import _worker

    context = multiprocessing.get_context("spawn")
    inbox, results = context.Queue(), context.Queue()
    worker = context.Process(target=_worker, args=(GENERATORS["vllm"], {"model": str(tiny_model)}, "0", inbox,
                                                   results, 0), daemon=True)
    worker.start()
    status, message, _ = results.get(timeout=300)
    worker.join(timeout=30)
    assert status == "failed" and "daemonic processes are not allowed to have children" in message


def test_the_engine_starts_beside_a_trainer_with_what_is_free(fake_vllm, tiny_model, monkeypatch):
    """vLLM refuses to start unless gpu_memory_utilization of the GPU is free: an undeclared share
    is what is free now, and a declared one that is not free is refused with both named."""
    from engine.evaluate.backends import vllm as backend_module

    monkeypatch.setenv("FAKE_VLLM_FREE_SHARE", "0.55")
    monkeypatch.setattr(backend_module, "free_share", lambda: 0.55)
    make_generator("vllm", model=str(tiny_model)).close()
    [load] = [e for e in fake_vllm() if e["event"] == "load"]
    assert load["gpu_memory_utilization"] == pytest.approx(0.52)
    with pytest.raises(UserError, match=r"gpu_memory_utilization 0.9 .* free \(55%\)"):
        make_generator("vllm", model=str(tiny_model), gpu_memory_utilization=0.9)


def test_checkpoints_of_one_architecture_share_a_compile_cache(fake_vllm, tiny_model, tmp_path):
    other = tmp_path / "checkpoint-2"
    shutil.copytree(tiny_model, other)
    make_generator("vllm", model=str(tiny_model)).close()
    make_generator("vllm", model=str(other)).close()
    dirs = [e["options"]["compilation_config"]["cache_dir"] for e in fake_vllm() if e["event"] == "load"]
    assert len(dirs) == 2 and dirs[0] == dirs[1]


def test_the_compile_cache_key_holds_what_vllm_would_hash_and_not_the_memory_share(tiny_model, tmp_path, monkeypatch):
    """vLLM uses a given cache_dir as it is (its own factors hash names only a folder it picks): a
    share of memory that follows what is free must not split the cache, a VLLM_ setting must."""
    from engine.evaluate.backends.vllm import compile_cache_dir

    monkeypatch.setenv("RLVR_VLLM_COMPILE_CACHE", str(tmp_path))
    base = {"model": str(tiny_model), "tensor_parallel_size": 1}
    beside_trainer = compile_cache_dir(str(tiny_model), "0.24.0", {**base, "gpu_memory_utilization": 0.52})
    alone = compile_cache_dir(str(tiny_model), "0.24.0", {**base, "gpu_memory_utilization": 0.9})
    assert beside_trainer == alone
    monkeypatch.setenv("VLLM_USE_STANDALONE_COMPILE", "0")
    assert compile_cache_dir(str(tiny_model), "0.24.0", {**base, "gpu_memory_utilization": 0.9}) != alone
    assert compile_cache_dir(str(tiny_model), "0.24.0", {**base, "tensor_parallel_size": 2}) != alone
