"""A real OpenAI-compatible HTTP server on loopback. With a model, it serves it through the hf
backend (real generation, not canned text); without one, it answers canned text after
`latency(prompt)` seconds (a server with the latency profile a test or bench wants). `fail_first`
answers that many requests with 503 first; `always_fail` answers every request with 500 (a server
that never recovers); `fail_after` answers that many requests, then fails every one with 500 (an
outage after the probes that identify the model). `served` names the models it lists under GET /v1/models (none: it answers
404 there, as a server without the listing). It counts completion requests, the most it held at
once, and the API keys it saw. `reasoning`: as behind a reasoning parser, a chat answer's text is
in `reasoning_content` and its `content` is null. `listing`: more of what GET /v1/models says of
each model (vLLM's `root`: where its weights were loaded from)."""

from __future__ import annotations

import json
import threading
import time
from typing import Callable, Optional, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from engine.evaluate.backends.base import Decoding, generate
from engine.evaluate.backends.hf import HFBackend


class Server:
    def __init__(self, model: Optional[str] = None, *, fail_first: int = 0, always_fail: bool = False,
                 latency: Callable[[str], float] = lambda prompt: 0.0, answer: str = "def f():\n    return 0",
                 choices: Optional[int] = None, served: Sequence[str] = (), fail_after: Optional[int] = None,
                 reasoning: bool = False, listing: Optional[dict] = None,
                 refuses: Sequence[str] = ()) -> None:
        """`choices`: answer that many choices whatever `n` asks (a server that ignores `n`).
        `refuses`: request arguments it does not know, answered 400 as OpenAI's API answers them."""
        self.backend = HFBackend(model=model, batch_size=4) if model else None
        self.lock = threading.Lock()  # one generate at a time: the model is not thread-safe
        self.fail_left, self.always_fail, self.requests = fail_first, always_fail, 0
        self.fail_after = fail_after
        self.latency, self.canned, self.choices, self.served = latency, answer, choices, list(served)
        self.reasoning, self.listing = reasoning, dict(listing or {})
        self.refuses, self.bodies = set(refuses), []
        self.in_flight = self.most_in_flight = 0
        self.keys: set[str] = set()
        handler = type("Handler", (_Handler,), {"server_state": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "Server":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, path: str, body: dict, key: str = "") -> tuple[int, dict]:
        with self.lock:
            self.bodies.append(dict(body))
        if unknown := sorted(self.refuses & set(body)):
            return 400, {"error": {"message": f"Unrecognized request argument supplied: {unknown[0]}",
                                   "type": "invalid_request_error", "param": None, "code": None}}
        with self.lock:
            self.keys.add(key)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            with self.lock:
                if self.fail_after is not None and self.requests >= self.fail_after:
                    self.always_fail = True
                if self.always_fail or self.fail_left > 0:
                    self.requests += 1
                    if self.always_fail:
                        return 500, {"error": "broken on purpose"}
                    self.fail_left -= 1
                    return 503, {"error": "busy"}
            if self.backend is None:
                return self._canned(path, body)
            return self._generated(path, body)
        finally:
            with self.lock:
                self.in_flight -= 1

    def _canned(self, path: str, body: dict) -> tuple[int, dict]:
        chat = path.endswith("chat/completions")
        prompt = body["messages"][-1]["content"] if chat else body["prompt"]
        with self.lock:
            self.requests += 1
        time.sleep(self.latency(prompt))
        choices = [{"index": i, "finish_reason": "stop",
                    **({"message": self._message(self.canned)} if chat else {"text": self.canned})}
                   for i in range(self.choices or body.get("n", 1))]
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": 8 * len(choices)}
        return 200, {"choices": choices, "usage": usage}

    def _logprobs(self, body: dict, chat: bool, text: str) -> dict:
        """The model's own log-probability of each token of its answer after the prompt, in the
        shape the OpenAI chat or completions API gives it."""
        import torch

        tok, model = self.backend.tokenizer, self.backend.model
        prompt = tok.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=True) if chat \
            else tok(body["prompt"]).input_ids
        prompt = list(prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt)
        answer = tok(text, add_special_tokens=False).input_ids
        with torch.no_grad():
            logits = model(torch.tensor([prompt + answer])).logits[0]
        scores = torch.log_softmax(logits.float(), dim=-1)
        values = [float(scores[len(prompt) - 1 + i, t]) for i, t in enumerate(answer)]
        tokens = [tok.decode([t]) for t in answer]
        if chat:
            return {"content": [{"token": t, "logprob": v, "bytes": None, "top_logprobs": []}
                                for t, v in zip(tokens, values)]}
        return {"tokens": tokens, "token_logprobs": values}

    def _message(self, text: str) -> dict:
        if self.reasoning:
            return {"role": "assistant", "content": None, "reasoning_content": text}
        return {"role": "assistant", "content": text}

    def _generated(self, path: str, body: dict) -> tuple[int, dict]:
        with self.lock:
            self.requests += 1
            chat = path.endswith("chat/completions")
            decoding = Decoding(temperature=body.get("temperature", 0.0), top_p=body.get("top_p", 1.0),
                                max_tokens=body.get("max_tokens", 16), n=body.get("n", 1),
                                stop=tuple(body.get("stop") or ()), seed=body.get("seed", 0))
            [gens] = generate(self.backend, [body["messages"] if chat else body["prompt"]], decoding)
            logprobs = [self._logprobs(body, chat, g.text) for g in gens] if body.get("logprobs") is not None \
                and body.get("logprobs") is not False else [None] * len(gens)
        choices = [{"index": i, "finish_reason": g.finish_reason,
                    **({"message": self._message(g.text)} if chat else {"text": g.text}),
                    **({"logprobs": lp} if lp is not None else {})}
                   for i, (g, lp) in enumerate(zip(gens, logprobs))]
        usage = {"prompt_tokens": sum(g.prompt_tokens for g in gens), "completion_tokens": sum(g.completion_tokens for g in gens)}
        return 200, {"object": "chat.completion" if chat else "text_completion", "choices": choices, "usage": usage}


class _Handler(BaseHTTPRequestHandler):
    server_state: Server
    protocol_version = "HTTP/1.1"  # keep-alive: a client's pooled connections are reused, as with a real server
    disable_nagle_algorithm = True  # headers and body go out at once, not 40 ms apart (delayed ACK)

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        status, payload = self.server_state.answer(self.path, body, key)
        self._send(status, payload)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        served = self.server_state.served
        if self.path.rstrip("/").endswith("/models") and served:
            self._send(200, {"object": "list", "data": [{"id": name, "object": "model", **self.server_state.listing}
                                                        for name in served]})
        else:
            self._send(404, {"error": "not found"})

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return None
