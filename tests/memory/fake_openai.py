"""A fake OpenAI-compatible chat-completions endpoint on loopback (a tiny http.server in a
thread): the test chooses each answer from the request the extractor sent."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[dict[str, Any]], dict[str, Any]]


class FakeChatCompletions:
    """Serves ``POST /v1/chat/completions``: the user message's JSON (the extractor's request)
    goes to ``responder``, whose object is answered as the assistant's content. Every request
    is kept in ``requests``; a responder that raises makes a 500."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.bodies: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.bodies.append(body)
                request = json.loads(body["messages"][-1]["content"])
                fake.requests.append(request)
                try:
                    content = json.dumps(fake.responder(request))
                    status = 200
                    answer = {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": content},
                            }
                        ],
                    }
                except Exception as exc:  # the test's responder chose to fail
                    status, answer = 500, {"error": {"message": str(exc), "type": "server_error"}}
                data = json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client is gone (a worker killed mid-request)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeChatCompletions:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def extract_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["task"] == "extract"]
