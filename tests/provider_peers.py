"""Local HTTP servers that speak the Voyage and Cohere rerank protocols, the
OpenAI chat-completions protocol (for the judge, through the real ChatOpenAI), and
the embeddings protocols of OpenAI and Voyage (``POST .../embeddings``) and Cohere
(``POST /v2/embed``).

Real sockets on 127.0.0.1, real JSON: the adapters under test cannot tell them from
the providers, except that the scores come from a transparent word-overlap rule, the
embeddings from hashed words (:func:`hashed_embedding`), and the judge's answer is
scripted.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
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


EMBEDDING_DIMENSION = 64


def hashed_embedding(text: str, dimension: int = EMBEDDING_DIMENSION) -> list[float]:
    """A unit vector of hashed words: texts sharing words point the same way."""
    vector = [0.0] * dimension
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
        vector[int.from_bytes(digest, "little") % dimension] += 1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


@dataclass
class PeerBehaviour:
    # ok | http500 | slow | drip | malformed | wrong_count | rate_limited | reset
    # | wrong_dimension (vectors half as long: a base URL now serving another model)
    mode: str = "ok"
    delay_s: float = 0.0
    answer: dict[str, Any] | None = None  # the judge's structured answer (chat peer)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    # Embeddings: the fault ``mode`` hits only the first ``fail_times`` requests
    # (0: every request); a request carrying ``poison`` always gets a 500.
    fail_times: int = 0
    poison: str | None = None
    retry_after: str = "7"
    times: list[float] = field(default_factory=list)  # monotonic arrival times


def _handler(behaviour: PeerBehaviour) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # Keep-alive, as the hosted providers are: an HTTP/1.0 peer closed every
        # connection, so each call paid a TCP connect on both sides of a load bench.
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: without TCP_NODELAY the second
        # waits for the client's delayed ACK (40 ms) on a kept-alive connection.
        disable_nagle_algorithm = True

        def log_message(self, *args: Any) -> None:
            return None

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            behaviour.requests.append(body)
            behaviour.headers.append(dict(self.headers))
            behaviour.times.append(time.monotonic())
            if self.path.endswith(("/embeddings", "/v2/embed")):
                self._embed(body, len(behaviour.requests))
                return
            if behaviour.mode == "reset":
                self.close_connection = True
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

        def _embed(self, body: dict[str, Any], number: int) -> None:
            texts = body.get("input", body.get("texts", []))
            texts = [texts] if isinstance(texts, str) else list(texts)
            if behaviour.poison and any(behaviour.poison in t for t in texts):
                self._send(500, b'{"message": "poisoned batch"}')
                return
            faulty = behaviour.fail_times == 0 or number <= behaviour.fail_times
            mode = behaviour.mode if faulty else "ok"
            if mode == "slow":
                time.sleep(behaviour.delay_s)
            elif mode == "http500":
                self._send(500, b'{"message": "internal error"}')
                return
            elif mode == "rate_limited":
                self._send(
                    429,
                    b'{"message": "slow down"}',
                    {"Retry-After": behaviour.retry_after},
                )
                return
            elif mode == "malformed":
                self._send(200, b'{"data": [{"index": 0, "embedd')
                return
            elif mode == "reset":
                self.close_connection = True
                self.connection.close()
                return
            width = EMBEDDING_DIMENSION // (2 if mode == "wrong_dimension" else 1)
            vectors = [hashed_embedding(t, width) for t in texts]
            if self.path.endswith("/v2/embed"):  # Cohere v2
                payload: dict[str, Any] = {
                    "id": "embed-local",
                    "embeddings": {"float": vectors},
                    "texts": texts,
                    "meta": {},
                }
            else:  # OpenAI and Voyage
                b64 = body.get("encoding_format") == "base64"
                payload = {
                    "object": "list",
                    "data": [
                        {
                            "object": "embedding",
                            "index": i,
                            "embedding": (
                                base64.b64encode(
                                    struct.pack(f"<{len(v)}f", *v)
                                ).decode()
                                if b64
                                else v
                            ),
                        }
                        for i, v in enumerate(vectors)
                    ],
                    "model": body.get("model", "local"),
                    "usage": {"prompt_tokens": 1, "total_tokens": 1},
                }
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


class _PeerServer(ThreadingHTTPServer):
    """A listen backlog for load: socketserver's default of 5 dropped connection
    attempts under 32 concurrent clients (each retried after a 1 s SYN timeout), so
    the peer, not the server under test, set a load bench's latency."""

    request_queue_size = 256


@contextmanager
def rerank_peer(
    behaviour: PeerBehaviour | None = None,
) -> Iterator[tuple[str, PeerBehaviour]]:
    """Serve on a free loopback port; yield (base URL, behaviour)."""
    behaviour = behaviour or PeerBehaviour()
    server = _PeerServer(("127.0.0.1", 0), _handler(behaviour))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", behaviour
    finally:
        server.shutdown()
        server.server_close()
