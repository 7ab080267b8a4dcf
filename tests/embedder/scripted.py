"""A scripted embeddings server on loopback speaking the OpenAI and Ollama shapes.

It is a real HTTP server (ThreadingHTTPServer in a thread), so the providers'
real httpx path is exercised. Each request takes the next step of the script
(``ok``, ``status``, ``sleep``, ``dims``); with the script empty it answers
``ok``. Vectors are deterministic per text.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from shared.embeddings.guard import default_guards


def vector_for(text: str, dims: int) -> list[float]:
    seed = hashlib.sha256(text.encode()).digest()
    raw = [((seed[i % 32] + i * 37) % 251) / 251.0 - 0.5 for i in range(dims)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


@dataclass
class Step:
    kind: str  # ok | status | sleep | dims
    status: int = 200
    message: str = ""
    seconds: float = 0.0
    dims: int = 0


@dataclass
class ScriptedServer:
    dims: int = 8
    steps: deque[Step] = field(default_factory=deque)
    requests: list[tuple[str, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    default: Step = field(default_factory=lambda: Step("ok"))
    # any request holding a text that contains this is refused with 400, whatever the order
    refuse: str | None = None
    url: str = ""
    _server: ThreadingHTTPServer | None = None

    def then(self, *steps: Step) -> ScriptedServer:
        self.steps.extend(steps)
        return self

    def start(self) -> ScriptedServer:
        script = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                script.requests.append((self.path, body, dict(self.headers)))
                step = script.steps.popleft() if script.steps else script.default
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                if script.refuse is not None and any(script.refuse in t for t in inputs):
                    step = Step("status", status=400, message="bad input")
                if step.kind == "sleep":
                    time.sleep(step.seconds)
                    step = Step("ok")
                if step.kind == "status":
                    if self.path.startswith("/api/"):
                        payload: Any = {"error": step.message}
                    else:
                        payload = {"error": {"message": step.message, "type": "server_error"}}
                    self._send(step.status, payload)
                    return
                dims = step.dims or script.dims
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                vectors = [vector_for(t, dims) for t in texts]
                if self.path.startswith("/api/embed"):
                    payload = {"model": body["model"], "embeddings": vectors}
                else:
                    payload = {
                        "object": "list",
                        "model": body["model"],
                        "data": [
                            {"object": "embedding", "index": i, "embedding": v}
                            for i, v in enumerate(vectors)
                        ],
                    }
                self._send(200, payload)

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        # a port an earlier server of this process had: this one is new, and must not
        # meet the circuit that server's failures (or its stop) opened
        for provider in ("openai", "ollama"):
            default_guards().forget(self.base_url(provider))
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def base_url(self, provider: str) -> str:
        return f"{self.url}/v1" if provider == "openai" else self.url
