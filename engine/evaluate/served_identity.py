"""What an OpenAI-compatible server serves under a name: the identity its records are keyed by.

A server is known by what it serves, not where: the key is the served name and a fingerprint of
what the server answers to fixed probe prompts, greedy, whatever field holds the answer (a
reasoning parser leaves `content` null and puts the text in `reasoning_content`; the sampled
tokens come with `logprobs` where the server offers them), and of the model metadata it lists
under /models when it publishes any (vLLM's `root`, a `revision`). A server whose probes all
come back empty cannot be told from other weights: it is refused, with how to pin an identity.

The fingerprint is made of one part per probe (each: a hash of its first tokens, then of the
whole answer) and one of the metadata, so a mismatch with a pinned fingerprint says which probe
differed, and whether it differed from its first tokens (other weights) or only later (the same
weights drifting: vLLM's greedy output moves with batch size, tensor parallelism, prefix caching
and the GPU). An identity that must not drift is pinned as the weights' revision
(`revision:<sha>`, checked against what the server lists) or a weights hash the user states
(`sha256:<hex>`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Optional

import httpx

from engine.errors import UserError

# Fixed prompts whose greedy answers tell one set of weights from another (any prompt would; these
# are short, and code-flavoured as the models served here are). Changing them changes every key.
PROBES = ("def fibonacci(n):", "Write a Python function that returns the reverse of a string.",
          "# Sort a list of integers in descending order\n")
PROBE_TOKENS = 24
HEAD_TOKENS = 6  # an answer's start: drift moves greedy decoding late, other weights early
HEAD_HEX, WHOLE_HEX, META_HEX = 2, 3, 1  # 3 probes x (2 + 3) + 1 = 16 hex digits
FINGERPRINT_LEN = len(PROBES) * (HEAD_HEX + WHOLE_HEX) + META_HEX
# What a server lists of a model that says which weights it serves (not when it started)
METADATA_KEYS = ("root", "parent", "revision")
PIN_FIX = ("pin what it serves instead: set the endpoint's `fingerprint: revision:<the weights' revision>` "
           "(checked against the revision or root the server lists under /models) or `fingerprint: "
           "sha256:<a hash of the weight files>` (taken as stated)")


@dataclass(frozen=True)
class ProbeAnswer:
    """What the server returned for one probe: each field that may hold the answer."""

    content: str = ""
    reasoning: str = ""
    tokens: tuple[str, ...] = ()  # the sampled tokens (ids where the server gives them), from logprobs
    logprobs: tuple[float, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.content or self.reasoning or self.tokens)

    def pieces(self) -> list[str]:
        """The answer as a sequence: its tokens where given, else its characters."""
        return list(self.tokens) if self.tokens else list(self.reasoning + "\x00" + self.content)

    def whole(self) -> list:
        """What identifies the answer: its pieces and, where given, their log-probabilities to a
        tenth (near checkpoints of one base often answer the same tokens, rarely as surely)."""
        return [self.pieces(), [round(x, 1) for x in self.logprobs]]


def answer_of(choice: dict[str, Any], chat: bool) -> ProbeAnswer:
    """Every field of one choice that may hold the answer, as the OpenAI chat and completions APIs,
    vLLM and SGLang write them."""
    message = choice.get("message") or {} if chat else {}
    content = (message.get("content") if chat else choice.get("text")) or ""
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    tokens: list[str] = []
    logprobs: list[float] = []
    ids = choice.get("token_ids")  # vLLM's `return_token_ids`
    lp = choice.get("logprobs") or {}
    if isinstance(lp, dict) and isinstance(lp.get("content"), list):  # chat: [{token, logprob, ...}]
        tokens = [str(t.get("token", "")) for t in lp["content"] if isinstance(t, dict)]
        logprobs = [float(t.get("logprob") or 0.0) for t in lp["content"] if isinstance(t, dict)]
    elif isinstance(lp, dict) and isinstance(lp.get("tokens"), list):  # completions: tokens, token_logprobs
        tokens = [str(t) for t in lp["tokens"]]
        logprobs = [float(x or 0.0) for x in lp.get("token_logprobs") or []]
    if isinstance(ids, list) and ids:
        tokens = [str(i) for i in ids]
    return ProbeAnswer(content=str(content), reasoning=str(reasoning), tokens=tuple(tokens), logprobs=tuple(logprobs))


def _hex(value: Any, digits: int) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:digits]


def fingerprint_of(answers: list[ProbeAnswer], metadata: dict[str, str]) -> str:
    # Each part is salted with the metadata: weights listed as loaded from elsewhere differ throughout.
    parts = [_hex([metadata, a.pieces()[:HEAD_TOKENS]], HEAD_HEX) + _hex([metadata, a.whole()], WHOLE_HEX)
             for a in answers]
    return "".join(parts) + _hex(metadata, META_HEX)


def differences(measured: str, pinned: str) -> str:
    """Which parts of two fingerprints differ, in words a user can act on."""
    width = HEAD_HEX + WHOLE_HEX
    said = []
    for i in range(len(PROBES)):
        a, b = measured[i * width:(i + 1) * width], pinned[i * width:(i + 1) * width]
        if a[:HEAD_HEX] != b[:HEAD_HEX]:
            said.append(f"probe {i + 1} differs from its first {HEAD_TOKENS} tokens")
        elif a != b:
            said.append(f"probe {i + 1} starts alike and differs later (or in its logprobs)")
    if measured[-META_HEX:] != pinned[-META_HEX:]:
        said.append("the model metadata the server lists differs")
    if not said:
        return "they are alike"
    late_only = all("later" in s for s in said)
    verdict = ("the same weights may drift so (greedy output moves with batch size, tensor parallelism, prefix "
               "caching and GPU type), or near weights of one base answer so" if late_only
               else "other weights answer so")
    return f"{'; '.join(said)} (of {len(PROBES)} probes): {verdict}"


class ServedModel:
    """One served name on one server: its listing, its probe answers, its identity."""

    def __init__(self, *, model: str, base_url: str, headers: dict[str, str], timeout_s: float = 120.0) -> None:
        self.model, self.base_url, self.headers, self.timeout_s = model, base_url.rstrip("/"), headers, timeout_s

    def metadata(self) -> dict[str, str]:
        """What the server lists of the model that names its weights (root, parent, revision); refuses
        a server that cannot be reached, or that lists its models and not this one."""
        try:
            response = httpx.get(f"{self.base_url}/models", headers=self.headers, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise UserError(f"cannot reach {self.base_url} ({type(exc).__name__}: {exc})\n"
                            "  fix: start the server (or correct the endpoint's base_url) and re-run") from None
        try:
            entries = [m for m in response.json().get("data", []) if isinstance(m, dict)] \
                if response.status_code == 200 else []
        except (ValueError, AttributeError):
            entries = []
        listed = [m.get("id") for m in entries]
        if listed and self.model not in listed:  # a server that lists nothing is asked all the same
            raise UserError(f"{self.base_url} serves {', '.join(map(repr, listed))}, not {self.model!r}\n"
                            f"  fix: set the endpoint's model to the name the server serves")
        entry = next((m for m in entries if m.get("id") == self.model), {})
        # a root that is the served name itself says nothing of the weights
        return {k: str(entry[k]) for k in METADATA_KEYS if entry.get(k) not in (None, "", self.model)}

    def probe(self, chat: bool) -> list[ProbeAnswer]:
        """Each probe's greedy answer, asked with logprobs (a server that refuses them is asked without)."""
        url = f"{self.base_url}/{'chat/completions' if chat else 'completions'}"
        answers = []
        with httpx.Client(timeout=self.timeout_s, headers=self.headers) as client:
            for text in PROBES:
                body: dict[str, Any] = {"model": self.model, "max_tokens": PROBE_TOKENS, "temperature": 0.0,
                                        "top_p": 1.0, "n": 1, "seed": 0}
                body.update({"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text})
                with_logprobs = {**body, **({"logprobs": True, "top_logprobs": 0} if chat else {"logprobs": 0})}
                response = self._post(client, url, with_logprobs)
                if response.status_code == 400:
                    response = self._post(client, url, body)
                if response.status_code != 200:
                    raise UserError(f"cannot tell what {self.base_url} serves as {self.model!r}: a probe request "
                                    f"failed (HTTP {response.status_code}: {response.text[:200]})\n  fix: start the "
                                    "server (or correct the endpoint's base_url) and re-run")
                try:
                    choice = (response.json().get("choices") or [{}])[0]
                except (ValueError, AttributeError, IndexError):
                    choice = {}
                answers.append(answer_of(choice, chat))
        return answers

    def _post(self, client: httpx.Client, url: str, body: dict[str, Any]) -> httpx.Response:
        from engine.retry import RETRYABLE_STATUS, Retryable, RetryPolicy, retry_after_s

        def once() -> httpx.Response:
            try:
                response = client.post(url, json=body)
            except httpx.HTTPError as exc:
                raise Retryable(f"{type(exc).__name__}: {exc}") from None
            if response.status_code in RETRYABLE_STATUS:
                raise Retryable(f"HTTP {response.status_code}", retry_after_s(response.headers))
            return response

        try:
            return RetryPolicy(attempts=5, first_wait_s=0.5).call(once)
        except Retryable as exc:
            raise UserError(f"cannot tell what {self.base_url} serves as {self.model!r}: a probe request failed "
                            f"({exc})\n  fix: start the server (or correct the endpoint's base_url) and re-run") from None

    def fingerprint(self, chat: bool) -> str:
        metadata = self.metadata()
        answers = self.probe(chat)
        if all(a.empty for a in answers):
            raise UserError(
                f"cannot tell what {self.base_url} serves as {self.model!r}: all {len(PROBES)} probes came back empty "
                "(no content, no reasoning_content, no tokens with logprobs; a reasoning parser or a chat template "
                "can hide the answer), and any other weights would look the same\n  fix: " + PIN_FIX)
        return fingerprint_of(answers, metadata)

    def key(self, chat: bool, pinned: Optional[str] = None) -> str:
        """The records' key: `served:<name>@<fingerprint>`, or the pinned revision or weights hash."""
        if pinned and pinned.startswith("sha256:"):
            self.metadata()  # still the right server and name
            return f"served:{self.model}@{pinned}"
        if pinned and pinned.startswith("revision:"):
            listed = self.metadata()
            wanted = pinned.removeprefix("revision:")
            names = {listed.get("revision"), listed.get("root"), (listed.get("root") or "").rstrip("/").rsplit("/", 1)[-1]}
            if not listed:
                raise UserError(f"{self.base_url} lists no revision or root for {self.model!r}, so the pinned "
                                f"{pinned} cannot be checked\n  fix: serve it with its revision (vLLM: "
                                "`--revision`), or pin `fingerprint: sha256:<a hash of the weight files>`")
            if wanted not in names:
                raise UserError(f"{self.base_url} serves {self.model!r} from {', '.join(f'{k} {v}' for k, v in listed.items())}, "
                                f"but the endpoint pins {pinned}\n  fix: serve the pinned weights, or pin these")
            if wanted in (listed.get("revision"), listed.get("root")):
                return f"served:{self.model}@{pinned}"
            # Matched by the last part of where the weights were loaded from alone ("checkpoint-40"),
            # which two runs' checkpoints share: the records are keyed by the whole of it, so another
            # run's checkpoint of that name never resumes into these records.
            return f"served:{self.model}@revision:{listed['root']}"
        measured = self.fingerprint(chat)
        if pinned is not None and pinned != measured:
            raise UserError(
                f"{self.base_url} serves {self.model!r} with fingerprint {measured}, but the endpoint pins {pinned}: "
                f"{differences(measured, pinned)}\n  fix: serve the pinned weights; or, for these, set the endpoint's "
                f"`fingerprint: {measured}` (a new run: the fingerprint is part of its id); or, when drift is what "
                f"moved it, {PIN_FIX}")
        return f"served:{self.model}@{measured}"
