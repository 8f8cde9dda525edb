"""A tiny tokenizer built locally, for CPU tests and smoke studies with no Hub access.

A byte-level BPE trained on the Python standard library's own sources (always
present, deterministic for a given Python), wrapped as a `PreTrainedTokenizerFast`
with a ChatML chat template, so verl's and trl's dataset classes can tokenize
chat prompts exactly as they would with a Qwen tokenizer.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def stdlib_corpus(limit: int = 170) -> list[str]:
    """The first `limit` stdlib modules by name: code-like text that needs no download."""
    return [str(p) for p in sorted(Path(os.__file__).parent.glob("*.py"))[:limit]]


# The code that trains and saves a tokenizer (this file) is part of what its files depend on: an
# edited trainer must never be served a tokenizer the old one kept.
_BUILDER = Path(__file__)
_MANIFEST = "sha256.json"  # in a kept tokenizer: its files' digests, checked before each copy


def _tokenizer_key(vocab_size: int) -> str:
    """Everything a trained tokenizer's files depend on: its settings, the corpus (this Python's
    standard library), the code that trains it and the versions of the libraries that train and
    save it."""
    import tokenizers
    import transformers

    digest = hashlib.sha256(json.dumps([vocab_size, SPECIAL_TOKENS, CHATML_TEMPLATE, tokenizers.__version__,
                                        transformers.__version__]).encode())
    digest.update(b"\0" + _BUILDER.read_bytes())
    for path in stdlib_corpus():
        digest.update(Path(path).name.encode() + b"\0" + Path(path).read_bytes())
    return f"bpe{vocab_size}-{digest.hexdigest()[:16]}"


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file() and p.name != _MANIFEST}


def _intact(kept: Path) -> bool:
    """Whether a kept tokenizer's files are the ones stored (a damaged copy is trained again)."""
    try:
        stored = json.loads((kept / _MANIFEST).read_text())
        return bool(stored == _digests(kept) and (kept / "tokenizer.json").is_file())
    except (OSError, ValueError):
        return False


def build_tiny_tokenizer(out_dir: Path, *, vocab_size: int = 1024, cache: Optional[Path] = None) -> Path:
    """Train, save and return `out_dir` (loadable with `AutoTokenizer.from_pretrained`). With
    `cache` (a folder), a tokenizer trained before from the same inputs is copied instead of
    trained again (seconds saved; training is deterministic, so the files are the same)."""
    out_dir = Path(out_dir)
    kept = Path(cache) / _tokenizer_key(vocab_size) if cache is not None else None
    if kept is not None and _intact(kept):
        shutil.copytree(kept, out_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns(_MANIFEST))
        return out_dir
    _train_tokenizer(out_dir, vocab_size=vocab_size)
    if kept is not None:
        _keep(out_dir, kept)
    return out_dir


def _keep(trained: Path, kept: Path) -> None:
    """Store a trained tokenizer whole or not at all (another process may store it first); the
    cache only saves time, so a cache that cannot be written is passed over."""
    try:
        partial = Path(tempfile.mkdtemp(prefix=f"{kept.name}.", dir=_made(kept.parent)))
    except OSError:
        return
    try:
        shutil.copytree(trained, partial, dirs_exist_ok=True)
        (partial / _MANIFEST).write_text(json.dumps(_digests(partial)))
        if kept.exists() and not _intact(kept):
            shutil.rmtree(kept, ignore_errors=True)  # a damaged copy is replaced
        os.replace(partial, kept)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _train_tokenizer(out_dir: Path, *, vocab_size: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train(stdlib_corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        bos_token=None, unk_token=None)
    tokenizer.chat_template = CHATML_TEMPLATE
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out_dir)


def build_tiny_model(out_dir: Path, *, hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                     vocab_size: int = 1024, seed: int = 0, tokenizer_dir: Path | None = None,
                     tokenizer_cache: Path | None = None) -> Path:
    """A random-init Qwen2 causal LM with the tiny tokenizer, saved as a Hugging Face folder.

    `tokenizer_dir` reuses a tokenizer already built (training one takes seconds); `tokenizer_cache`
    is a folder of tokenizers kept by what they were trained from (`build_tiny_tokenizer`)."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    out_dir = Path(out_dir)
    tokenizer_path = tokenizer_dir or build_tiny_tokenizer(out_dir, vocab_size=vocab_size, cache=tokenizer_cache)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=1024, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
