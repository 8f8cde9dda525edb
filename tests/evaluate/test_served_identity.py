"""A served model is identified by what it serves: two real loopback servers serving two different
tiny-model checkpoints under one name, behind a reasoning-style answer (`content` null, the text in
`reasoning_content`), get two identities; a server whose probes all come back empty is refused with
how to pin one; a pinned fingerprint that differs says which probe differed; a pinned revision is
checked against what the server lists, and no drift of greedy output moves it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engine.errors import UserError
from engine.evaluate.backends.openai import OpenAIBackend
from engine.evaluate.served_identity import (
    FINGERPRINT_LEN,
    HEAD_HEX,
    PROBES,
    WHOLE_HEX,
    ProbeAnswer,
    answer_of,
    differences,
    fingerprint_of,
)
from engine.tinymodel import build_tiny_model

sys.path.insert(0, str(Path(__file__).parent))
from openai_server import Server  # noqa: E402


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory):
    """Two tiny models of one shape and tokenizer, other weights (another seed)."""
    root = tmp_path_factory.mktemp("checkpoints")
    first = build_tiny_model(root / "a", hidden=32, layers=1, heads=2, kv_heads=1, vocab_size=512, seed=1)
    second = build_tiny_model(root / "b", hidden=32, layers=1, heads=2, kv_heads=1, vocab_size=512, seed=2,
                              tokenizer_dir=first)
    return first, second


def _served(server: Server) -> OpenAIBackend:
    return OpenAIBackend(model="policy", base_url=server.base_url)


def test_two_checkpoints_under_one_name_behind_a_reasoning_parser_are_told_apart(two_checkpoints):
    first, second = two_checkpoints
    with Server(str(first), served=["policy"], reasoning=True) as a, \
            Server(str(second), served=["policy"], reasoning=True) as b:
        fa, fb = _served(a).fingerprint(True), _served(b).fingerprint(True)
        again = _served(a).fingerprint(True)  # the same weights, asked again: the same identity
        assert len(fa) == len(fb) == FINGERPRINT_LEN and fa != fb and again == fa
        with pytest.raises(UserError) as refused:
            _served(b).served().key(True, fa)
    said = str(refused.value)
    assert f"fingerprint {fb}, but the endpoint pins {fa}" in said
    # Random tiny models of one shape answer the same degenerate tokens, as near checkpoints of
    # one base do: their logprobs tell them apart, and the error says it is no proof of other weights.
    assert "probe 1 starts alike and differs later (or in its logprobs)" in said and "near weights" in said


def test_a_server_whose_probes_all_come_back_empty_is_refused_with_how_to_pin_an_identity():
    with Server(served=["policy"], reasoning=True, answer="") as server, pytest.raises(UserError) as refused:
        _served(server).fingerprint(True)
    said = str(refused.value)
    assert f"all {len(PROBES)} probes came back empty" in said
    assert "fingerprint: revision:" in said and "fingerprint: sha256:" in said


def test_a_pinned_revision_is_checked_against_the_listing_and_keys_the_records():
    with Server(served=["policy"], listing={"root": "/models/policy-step-40"}) as server:
        served = _served(server).served()
        assert served.metadata() == {"root": "/models/policy-step-40"}
        assert served.key(True, "revision:/models/policy-step-40") == "served:policy@revision:/models/policy-step-40"
        # pinned by the last part of its root alone, its records are keyed by the whole root
        assert served.key(True, "revision:policy-step-40") == "served:policy@revision:/models/policy-step-40"
        with pytest.raises(UserError, match="but the endpoint pins revision:policy-step-80"):
            served.key(True, "revision:policy-step-80")
        listed = served.fingerprint(True)
    # What the server lists is part of the fingerprint: the same answers from weights loaded elsewhere differ.
    with Server(served=["policy"], listing={"root": "/models/policy-step-80"}) as other:
        assert _served(other).fingerprint(True) != listed
    with Server(served=["policy"]) as bare, pytest.raises(UserError, match="lists no revision or root"):
        _served(bare).served().key(True, "revision:abc")


def test_every_field_that_may_hold_the_answer_is_read():
    chat = answer_of({"message": {"content": None, "reasoning_content": "think"},
                      "logprobs": {"content": [{"token": "a", "logprob": -0.1}, {"token": "b", "logprob": -2.0}]}},
                     True)
    assert chat == ProbeAnswer(content="", reasoning="think", tokens=("a", "b"), logprobs=(-0.1, -2.0))
    plain = answer_of({"text": "x", "logprobs": {"tokens": ["x"], "token_logprobs": [-0.5]}, "token_ids": [7]}, False)
    assert plain.tokens == ("7",) and plain.content == "x"
    assert answer_of({"message": {"content": None}}, True).empty


def test_a_mismatch_says_drift_when_only_late_tokens_of_a_probe_moved():
    tokens = [str(i) for i in range(24)]
    base = [ProbeAnswer(tokens=tuple(tokens)) for _ in PROBES]
    drifted = list(base)
    drifted[1] = ProbeAnswer(tokens=tuple(tokens[:20] + ["x", "y", "z", "w"]))  # the same start, a late turn
    a, b = fingerprint_of(base, {}), fingerprint_of(drifted, {})
    width = HEAD_HEX + WHOLE_HEX
    assert a[:width] == b[:width] and a[width:width + HEAD_HEX] == b[width:width + HEAD_HEX] and a != b
    said = differences(b, a)
    assert said.startswith("probe 2 starts alike and differs later (or in its logprobs) (of 3 probes): the same "
                           "weights may drift so")


def test_a_spec_pins_a_fingerprint_a_revision_or_a_weights_hash_and_nothing_else():
    from pydantic import ValidationError

    from engine.spec.phases import EndpointSpec

    for pin in ("0123456789abcdef", "revision:policy-step-40", "sha256:" + "ab" * 32):
        assert EndpointSpec(base_url="http://h:8000/v1", model="policy", fingerprint=pin).fingerprint == pin
    with pytest.raises(ValidationError):
        EndpointSpec(base_url="http://h:8000/v1", model="policy", fingerprint="policy-step-40")


def test_two_runs_checkpoints_of_one_name_pinned_by_that_name_never_share_records():
    """`revision:checkpoint-40` matches the root of run a's checkpoint-40 and of run b's: an evaluation
    resumed against the other would mix two models' samples in one metrics.json."""
    keys = []
    for root in ("/runs/a/sft/checkpoint-40", "/runs/b/sft/checkpoint-40"):
        with Server(served=["policy"], listing={"root": root}) as server:
            keys.append(_served(server).served().key(True, "revision:checkpoint-40"))
    assert keys[0] != keys[1] and all("checkpoint-40" in k for k in keys)
