"""A real OpenAI-compatible HTTP server on loopback that serves a local model through the hf
backend (real generation, not canned text). `fail_first` answers that many requests with 503
first; `always_fail` answers every request with 500 (a server that never recovers)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from engine.evaluate.backends.base import Decoding
from engine.evaluate.backends.hf import HFBackend


class Server:
    def __init__(self, model: str, *, fail_first: int = 0, always_fail: bool = False) -> None:
        self.backend = HFBackend(model=model, batch_size=4)
        self.lock = threading.Lock()  # one generate at a time: the model is not thread-safe
        self.fail_left, self.always_fail, self.requests = fail_first, always_fail, 0
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

    def answer(self, path: str, body: dict) -> tuple[int, dict]:
        with self.lock:
            self.requests += 1
            if self.always_fail:
                return 500, {"error": "broken on purpose"}
            if self.fail_left > 0:
                self.fail_left -= 1
                return 503, {"error": "busy"}
            chat = path.endswith("chat/completions")
            decoding = Decoding(temperature=body.get("temperature", 0.0), top_p=body.get("top_p", 1.0),
                                max_tokens=body.get("max_tokens", 16), n=body.get("n", 1),
                                stop=tuple(body.get("stop") or ()), seed=body.get("seed", 0))
            [gens] = self.backend.generate([body["messages"] if chat else body["prompt"]], decoding)
        choices = [{"index": i, "finish_reason": g.finish_reason,
                    **({"message": {"role": "assistant", "content": g.text}} if chat else {"text": g.text})}
                   for i, g in enumerate(gens)]
        usage = {"prompt_tokens": sum(g.prompt_tokens for g in gens), "completion_tokens": sum(g.completion_tokens for g in gens)}
        return 200, {"object": "chat.completion" if chat else "text_completion", "choices": choices, "usage": usage}


class _Handler(BaseHTTPRequestHandler):
    server_state: Server

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status, payload = self.server_state.answer(self.path, body)
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return None
