"""Local HTTP servers that speak the Voyage and Cohere rerank protocols, and the
OpenAI chat-completions protocol (for the judge, through the real ChatOpenAI).

Real sockets on 127.0.0.1, real JSON: the adapters under test cannot tell them from
the providers, except that the scores come from a transparent word-overlap rule and
the judge's answer is scripted.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def overlap_score(query: str, document: str) -> float:
    """Share of the query's words found in the document: a deterministic relevance."""
    words = set(re.findall(r"\w+", query.lower()))
    found = set(re.findall(r"\w+", document.lower()))
    return len(words & found) / len(words) if words else 0.0


@dataclass
class PeerBehaviour:
    # ok | http500 | slow | drip | malformed | wrong_count | rate_limited | reset
    mode: str = "ok"
    delay_s: float = 0.0
    answer: dict[str, Any] | None = None  # the judge's structured answer (chat peer)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)


def _handler(behaviour: PeerBehaviour) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return None

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            behaviour.requests.append(body)
            behaviour.headers.append(dict(self.headers))
            if behaviour.mode == "reset":
                self.connection.close()
                return
            if behaviour.mode == "slow":
                time.sleep(behaviour.delay_s)
            if behaviour.mode == "drip":  # headers at once, then a byte at a time
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "64")
                self.end_headers()
                try:
                    for _ in range(64):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(behaviour.delay_s / 64)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                return
            if behaviour.mode == "http500":
                self._send(500, b'{"message": "internal error"}')
                return
            if behaviour.mode == "rate_limited":
                self._send(429, b'{"message": "slow down"}', {"Retry-After": "7"})
                return
            if behaviour.mode == "malformed":
                self._send(200, b'{"data": [{"index": 0, "relevance_')
                return
            if self.path.endswith("/chat/completions"):
                self._chat(body)
                return
            docs = body["documents"]
            scored = [
                {"index": i, "relevance_score": overlap_score(body["query"], d)}
                for i, d in enumerate(docs)
            ]
            scored.sort(key=lambda r: -r["relevance_score"])
            if behaviour.mode == "wrong_count":
                scored = scored[:1]
            if self.path.endswith("/v2/rerank"):
                payload = {"id": "x", "results": scored, "meta": {}}
            else:
                payload = {"object": "list", "data": scored, "model": body["model"]}
            self._send(200, json.dumps(payload).encode())

        def _chat(self, body: dict[str, Any]) -> None:
            content = json.dumps(behaviour.answer or {"rewrite": ""})
            if behaviour.mode == "wrong_count":  # a reply with no choices at all
                choices: list[dict[str, Any]] = []
            else:
                choices = [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": content},
                    }
                ]
            payload = {
                "id": "chatcmpl-local",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "local"),
                "choices": choices,
                "usage": {
                    "prompt_tokens": 1,
                    "completion_tokens": 1,
                    "total_tokens": 2,
                },
            }
            self._send(200, json.dumps(payload).encode())

        def _send(
            self, status: int, body: bytes, headers: dict[str, str] | None = None
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up at its deadline, as intended

    return Handler


@contextmanager
def rerank_peer(
    behaviour: PeerBehaviour | None = None,
) -> Iterator[tuple[str, PeerBehaviour]]:
    """Serve on a free loopback port; yield (base URL, behaviour)."""
    behaviour = behaviour or PeerBehaviour()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(behaviour))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", behaviour
    finally:
        server.shutdown()
        server.server_close()
