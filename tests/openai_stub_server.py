"""A real HTTP server on localhost that speaks the OpenAI chat-completions API with scripted replies.

Each POST to /v1/chat/completions takes the next entry of the script:
  {"content": "..."}                         a 200 reply (streamed as SSE when the request asks for it)
  {"content": "...", "prompt_tokens": N, "completion_tokens": M}   with the usage it reports
  {"status": 429, "retry_after_ms": 10}      an error status (any code), optionally with a Retry-After
  {"delay_s": 0.2, ...}                      wait before answering
When the script runs out, `then` (an entry) answers every further request. Every request is recorded
(path, lower-cased headers, JSON body) in `requests`, in arrival order.

Also runnable by hand:  python tests/openai_stub_server.py --port 8000 --script replies.json [--log requests.jsonl]
"""
from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StubOpenAI:
    """Scripted OpenAI-compatible server; use as a context manager, point clients at `base_url`."""

    def __init__(self, script: list[dict] | None = None, then: dict | None = None, port: int = 0,
                 log_path: str | None = None):
        self.script = list(script or [])
        self.then = then or {"status": 500, "error": "the stub's script is exhausted"}
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0  # most chat-completion requests being answered at the same time
        self.log_path = log_path
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def completions(self) -> list[dict]:
        """Bodies of the chat-completion requests received, in order."""
        with self._lock:
            return [r["body"] for r in self.requests if r["path"].endswith("/chat/completions")]

    def start(self) -> "StubOpenAI":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "StubOpenAI":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _next(self, record: dict) -> dict:
        with self._lock:
            self.requests.append(record)
            if self.log_path:
                with open(self.log_path, "a") as f:
                    f.write(json.dumps(record) + "\n")
            return self.script.pop(0) if self.script else self.then

    def _handler(self):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": "stub-model", "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    return self._json(400, {"error": {"message": "body is not JSON", "type": "invalid_request"}})
                headers = {k.lower(): v for k, v in self.headers.items()}
                entry = stub._next({"path": self.path, "headers": headers, "body": body, "time": time.time()})
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                with stub._lock:
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                try:
                    self._answer(entry, body)
                finally:
                    with stub._lock:
                        stub.in_flight -= 1

            def _answer(self, entry: dict, body: dict):
                if entry.get("delay_s"):
                    time.sleep(entry["delay_s"])
                status = entry.get("status", 200)
                if status != 200:
                    headers = {}
                    if "retry_after_ms" in entry:
                        headers["retry-after-ms"] = str(entry["retry_after_ms"])
                    message = entry.get("error", f"scripted error {status}")
                    return self._json(status, {"error": {"message": message, "type": "scripted", "code": status}},
                                      headers)
                content = entry.get("content", "")
                prompt_chars = len(json.dumps(body.get("messages", [])))
                usage = {"prompt_tokens": entry.get("prompt_tokens", prompt_chars // 4),
                         "completion_tokens": entry.get("completion_tokens", max(1, len(content) // 4))}
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                model = body.get("model", "stub-model")
                if body.get("stream"):
                    return self._stream(content, usage, model, body)
                self._json(200, {
                    "id": f"chatcmpl-{len(stub.requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": model, "usage": usage,
                    "choices": [{"index": 0, "finish_reason": entry.get("finish_reason", "stop"),
                                 "message": {"role": "assistant", "content": content}}]})

            def _json(self, status: int, payload: dict, headers: dict | None = None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, content: str, usage: dict, model: str, body: dict):
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                base = {"id": "chatcmpl-stream", "object": "chat.completion.chunk", "created": int(time.time()),
                        "model": model}
                step = max(1, len(content) // 3)
                pieces = [content[i:i + step] for i in range(0, len(content), step)] or [""]
                for i, piece in enumerate(pieces):
                    delta = {"content": piece} if i else {"role": "assistant", "content": piece}
                    self._event(dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": None}]))
                self._event(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]))
                if (body.get("stream_options") or {}).get("include_usage"):
                    self._event(dict(base, choices=[], usage=usage))
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

            def _event(self, payload: dict):
                self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())

        return Handler


def main() -> None:
    ap = argparse.ArgumentParser(description="Scripted OpenAI chat-completions server on localhost.")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--script", help="JSON file: a list of script entries")
    ap.add_argument("--then", default='{"content": "no more scripted replies"}', help="JSON entry after the script")
    ap.add_argument("--log", help="append every request to this JSONL file")
    args = ap.parse_args()
    script = json.load(open(args.script)) if args.script else []
    stub = StubOpenAI(script, then=json.loads(args.then), port=args.port, log_path=args.log).start()
    print(f"serving {stub.base_url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        stub.stop()


if __name__ == "__main__":
    main()
