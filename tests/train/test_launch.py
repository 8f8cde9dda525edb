"""A local model's size is counted from its weight files' headers, whatever their dtype: the launch
(DDP or FSDP) and the forecast read it."""

from __future__ import annotations

import torch
from safetensors.torch import save_file

from engine.spec.model import ModelRef
from engine.train.launch import params_b_of, safetensors_params

TENSORS = {"embed.weight": (1000, 64), "layer.weight": (64, 64), "layer.bias": (64,)}
PARAMS = 1000 * 64 + 64 * 64 + 64


def weights(folder, dtype, shards=1):
    folder.mkdir()
    names = list(TENSORS)
    for i in range(shards):
        part = {n: torch.zeros(TENSORS[n], dtype=dtype) for n in names[i::shards]}
        save_file(part, str(folder / f"model-{i:05d}.safetensors"), metadata={"format": "pt"})
    return folder


def test_fp32_and_bf16_weights_are_the_same_size(tmp_path):
    fp32 = weights(tmp_path / "fp32", torch.float32)
    bf16 = weights(tmp_path / "bf16", torch.bfloat16, shards=2)
    for folder in (fp32, bf16):
        assert params_b_of({}, ModelRef(path=str(folder))) == PARAMS / 1e9
    assert safetensors_params(next(fp32.glob("*.safetensors"))) == PARAMS


def test_a_file_that_is_not_safetensors_leaves_the_size_unknown(tmp_path):
    folder = weights(tmp_path / "m", torch.float32)
    (folder / "broken.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{nope")
    assert params_b_of({}, ModelRef(path=str(folder))) is None
