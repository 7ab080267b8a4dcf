"""A scripted OpenAI-compatible chat-completions server on loopback (a real HTTP server).

Each POST /v1/chat/completions takes the next scripted reply, or asks ``responder``
when the script is empty. A reply is (status, content-or-body, delay seconds).
Every request body is recorded.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from engram_cli.embedded import free_port


@dataclass
class Reply:
    content: Any = None  # a str or a JSON-able value: the assistant message content
    status: int = 200
    delay: float = 0.0
    raw: str | None = None  # a whole response body instead of a chat completion
    headers: dict[str, str] = field(default_factory=dict)
    usage: tuple[int, int] = (50, 20)


def completion(content: Any, usage: tuple[int, int] = (50, 20)) -> dict[str, Any]:
    text = content if isinstance(content, str) else json.dumps(content)
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": "scripted",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
        ],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
        },
    }


class ScriptedLLM:
    def __init__(self, responder: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        self.script: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.responder = responder
        self.port = free_port()
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with outer._lock:
                    outer.requests.append(
                        {"path": self.path, "body": body, "auth": self.headers.get("authorization")}
                    )
                    reply = outer.script.popleft() if outer.script else None
                if reply is None:
                    if outer.responder is None:
                        reply = Reply(status=500, raw='{"error": "script exhausted"}')
                    else:
                        reply = outer.responder(body)
                if reply.delay:
                    time.sleep(reply.delay)
                if not self.path.endswith("/chat/completions"):
                    reply = Reply(status=404, raw='{"error": "not found"}')
                payload = (
                    reply.raw
                    if reply.raw is not None
                    else json.dumps(completion(reply.content, reply.usage))
                )
                data = payload.encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *replies: Reply) -> None:
        self.script.extend(replies)

    def prompts(self) -> list[str]:
        return [r["body"]["messages"][-1]["content"] for r in self.requests]

    def __enter__(self) -> ScriptedLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
