"""A process standing in for a vLLM server, for supervisor tests: run with vLLM's arguments
(`--port N`, the rest ignored), it answers /health, /v1/models and /v1/completions like a
ready vLLM. Standard library only, so it starts in a blink.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, {})
        elif self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "stub", "max_model_len": 2048}]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if self.path == "/v1/completions" and body["model"] == "stub":
            print("completion", json.dumps(body), flush=True)  # the tests read the warm-ups in the log
            self._send(200, {"choices": [{"text": "x", "finish_reason": "length"}]})
        else:
            self._send(404, {"error": "not found"})

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    port = int(sys.argv[sys.argv.index("--port") + 1])
    print("stub vLLM", " ".join(sys.argv[1:]), flush=True)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
