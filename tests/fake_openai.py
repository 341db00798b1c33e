"""A fake OpenAI-compatible server on loopback, speaking the real chat-completions wire format.

It replays a queue of scripted replies, one per request, and records every request it receives.
A request that finds the queue empty (or hits an unknown route) is answered with a 400 error, which
the SDK does not retry, and is remembered: ``check()`` raises for it, and the fixture in
test_llm.py calls ``check()`` at teardown, so an unexpected request fails the test loudly instead
of being swallowed by the code under test.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API_KEY = "sk-test-0123456789abcdef"
MODEL = "test-model"

# Real retried errors carry no delay hint; these do (the SDK honours retry-after-ms) so that tests
# exercising the SDK's retries take milliseconds instead of its exponential backoff.
FAST_RETRY = {"retry-after-ms": "5"}


@dataclass(frozen=True)
class Reply:
    """One scripted answer."""

    content: str | None = ""
    """The assistant message's content (a success)."""
    finish_reason: str = "stop"
    """'stop', 'length', 'content_filter', ..."""
    status: int = 200
    """HTTP status; not 200 means an error body built from the fields below."""
    error_type: str = ""
    """error.type of an error reply."""
    error_code: str | None = None
    """error.code of an error reply."""
    message: str = ""
    """error.message of an error reply."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers."""


def ok(content: str | None, finish_reason: str = "stop") -> Reply:
    return Reply(content=content, finish_reason=finish_reason)


def error(status: int, headers: Mapping[str, str] | None = None, message: str | None = None) -> Reply:
    """An error as the OpenAI API writes it, for 400, 401, 404, 429 and 500."""
    kinds = {
        400: ("invalid_request_error", None, "Bad request."),
        401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
        404: ("invalid_request_error", "model_not_found", f"The model `{MODEL}` does not exist or you do not have access to it."),
        429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests."),
        500: ("server_error", None, "The server had an error while processing your request. Sorry about that!"),
    }  # fmt: skip
    kind, code, default = kinds[status]
    return Reply(status=status, error_type=kind, error_code=code, message=message or default,
                 headers=dict(headers or {}))


@dataclass(frozen=True)
class Request:
    """One request the server received."""

    path: str
    """URL path."""
    headers: Mapping[str, str]
    """Request headers, lower-cased names."""
    body: Mapping[str, Any]
    """The JSON body."""

    @property
    def messages(self) -> list[Mapping[str, Any]]:
        return list(self.body.get("messages", []))

    def text(self) -> str:
        """All message contents joined, for assertions on the prompt."""
        return "\n".join(str(m.get("content", "")) for m in self.messages)


class FakeOpenAI:
    """The server. ``url`` is the base URL to hand to ``openai.OpenAI(base_url=...)``."""

    def __init__(self, api_key: str = API_KEY) -> None:
        self.api_key = api_key
        self.replies: deque[Reply] = deque()
        self.requests: list[Request] = []
        self.unexpected: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def check(self) -> None:
        """Raise if a request found no scripted reply, or if scripted replies were never asked for."""
        if self.unexpected:
            raise AssertionError("fake OpenAI server got unexpected requests: " + "; ".join(self.unexpected))
        if self.replies:
            raise AssertionError(f"fake OpenAI server: {len(self.replies)} scripted replies were never requested")

    def _answer(self, path: str, headers: Mapping[str, str], raw: bytes) -> tuple[int, dict[str, Any], Mapping[str, str]]:
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw.decode(errors="replace")}
        with self._lock:
            self.requests.append(Request(path, headers, body))
            if path != "/v1/chat/completions":
                self.unexpected.append(f"request to unknown route {path}")
                return 404, _error_body("invalid_request_error", None, f"Invalid URL (POST {path})"), {}
            if headers.get("authorization") != f"Bearer {self.api_key}":
                return 401, _error_body("invalid_request_error", "invalid_api_key", "Incorrect API key provided."), {}
            if not self.replies:
                self.unexpected.append(f"request #{len(self.requests)} arrived with no scripted reply left")
                return 400, _error_body("invalid_request_error", None, "fake server: no scripted reply left"), {}
            reply = self.replies.popleft()
        if reply.status != 200:
            return reply.status, _error_body(reply.error_type, reply.error_code, reply.message), reply.headers
        n_prompt = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        n_completion = len((reply.content or "").split())
        return 200, {
            "id": f"chatcmpl-fake{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", MODEL),
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": reply.content, "refusal": None},
                "logprobs": None,
                "finish_reason": reply.finish_reason,
            }],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_completion,
                      "total_tokens": n_prompt + n_completion},
            "system_fingerprint": "fp_fake",
        }, reply.headers  # fmt: skip

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, payload, extra = fake._answer(self.path, headers, raw)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self.do_POST()

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        return Handler


def _error_body(kind: str, code: str | None, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}

