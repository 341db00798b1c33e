"""A fake OpenAI-compatible server on loopback, speaking the real chat-completions wire format.

It replays a queue of scripted replies, one per request, and records every request it receives.
A request that finds the queue empty (or hits an unknown route) is answered with a 400 error, which
the SDK does not retry, and is remembered: ``check()`` raises for it, and the fixture in
test_llm.py calls ``check()`` at teardown, so an unexpected request fails the test loudly instead
of being swallowed by the code under test.

Tool calls use the real wire format: the assistant message has ``content: null`` and
``tool_calls: [{"id": "call_1", "type": "function", "function": {"name": ..., "arguments": "{}"}}]``
with ``finish_reason: "tool_calls"``. Like the real API, the server refuses (400) a conversation in
which a tool call has no ``tool`` reply or a ``tool`` message answers no call; the ``tools`` array
and the ``tool`` messages of each request are at hand as ``Request.tools`` and
``Request.tool_messages``.

``GET /v1/models`` lists ``models`` (``MODEL`` and "fake-model", the two names tests use) the way
vLLM does, with ``max_model_len`` when ``context`` is set; these requests go to ``model_requests``,
not ``requests``, and consume no scripted reply. With ``context`` set, a chat request whose prompt
(counted in words) plus ``max_tokens`` exceeds it is refused with vLLM's 400, as an 8k-context server
refuses a 16k budget, also without consuming a scripted reply.

``NetworkGuard`` keeps tests off real providers: while it is installed, any connection to a host
that is not loopback (and any name lookup of one) raises and is remembered, and ``check()`` fails.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
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
    tool_calls: tuple[tuple[str, str], ...] = ()
    """(function name, arguments as a JSON string) for each tool call; ids are made by the server."""


def ok(content: str | None, finish_reason: str = "stop") -> Reply:
    return Reply(content=content, finish_reason=finish_reason)


def calls(*names: str, arguments: str = "{}", content: str | None = None) -> Reply:
    """An assistant turn that calls these functions (content null, finish_reason 'tool_calls')."""
    return Reply(content=content, finish_reason="tool_calls", tool_calls=tuple((n, arguments) for n in names))


def error(status: int, headers: Mapping[str, str] | None = None, message: str | None = None) -> Reply:
    """An error as the OpenAI API writes it, for 400, 401, 404, 429 and 500."""
    kinds = {
        400: ("invalid_request_error", None, "Bad request."),
        401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
        404: ("invalid_request_error", "model_not_found", f"The model `{MODEL}` does not exist or you do not have access to it."),
        429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests."),
        500: ("server_error", None, "The server had an error while processing your request. Sorry about that!"),
    }
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

    @property
    def tools(self) -> list[Mapping[str, Any]]:
        """The ``tools`` array of the request (empty when none was sent)."""
        return list(self.body.get("tools") or [])

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]

    @property
    def tool_messages(self) -> list[Mapping[str, Any]]:
        """The ``tool`` role messages of the request, in order."""
        return [m for m in self.messages if m.get("role") == "tool"]

    def text(self) -> str:
        """All message contents joined, for assertions on the prompt."""
        return "\n".join(str(m.get("content") or "") for m in self.messages)


def _tool_call_problem(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """What the real API says about a conversation whose tool calls and tool replies do not pair up."""
    pending: list[str] = []
    for m in [*messages, {"role": "end"}]:
        role = m.get("role")
        if role == "tool":
            if m.get("tool_call_id") not in pending:
                return ("Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                        "with 'tool_calls'.")
            pending.remove(m["tool_call_id"])
            continue
        if pending:
            return ("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                    f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}")
        if role == "assistant":
            pending = [c.get("id") for c in m.get("tool_calls") or []]
    return None


class FakeOpenAI:
    """The server. ``url`` is the base URL to hand to ``openai.OpenAI(base_url=...)``."""

    def __init__(self, api_key: str = API_KEY, models: Sequence[str] = (MODEL, "fake-model"),
                 context: int | None = None, models_route: bool = True, fallback: Reply | None = None) -> None:
        self.api_key = api_key
        self.fallback = fallback
        """The answer once the scripted ones are spent (a demonstration's "nothing more"); None: a 400 and a
        failed check(), as tests want."""
        self.models = tuple(models)
        """What GET /v1/models lists."""
        self.context = context
        """The served model's context in tokens (vLLM's max_model_len); None: unlimited and not reported."""
        self.models_route = models_route
        """False: GET /v1/models answers 404, as some gateways do."""
        self.model_requests: list[Request] = []
        self.replies: deque[Reply] = deque()
        self.requests: list[Request] = []
        self.unexpected: list[str] = []
        self._calls = 0
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
            if path.startswith("/v1/models"):
                return self._models(path, headers, body)
            self.requests.append(Request(path, headers, body))
            if path != "/v1/chat/completions":
                self.unexpected.append(f"request to unknown route {path}")
                return 404, _error_body("invalid_request_error", None, f"Invalid URL (POST {path})"), {}
            if headers.get("authorization") != f"Bearer {self.api_key}":
                return 401, _error_body("invalid_request_error", "invalid_api_key", "Incorrect API key provided."), {}
            problem = _tool_call_problem(body.get("messages", []))
            if problem is not None:
                self.unexpected.append(f"request #{len(self.requests)}: {problem}")
                return 400, _error_body("invalid_request_error", None, problem), {}
            n_prompt = sum(len(str(m.get("content") or "").split()) for m in body.get("messages", []))
            asked = int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
            if self.context is not None and n_prompt + asked > self.context:
                return 400, _error_body("BadRequestError", None, (
                    f"This model's maximum context length is {self.context} tokens. However, you requested "
                    f"{n_prompt + asked} tokens ({n_prompt} in the messages, {asked} in the completion). Please reduce "
                    "the length of the messages or completion.")), {}
            if not self.replies and self.fallback is not None:
                self.replies.append(self.fallback)
            if not self.replies:
                self.unexpected.append(f"request #{len(self.requests)} arrived with no scripted reply left")
                return 400, _error_body("invalid_request_error", None, "fake server: no scripted reply left"), {}
            reply = self.replies.popleft()
            if reply.tool_calls and not body.get("tools"):
                self.unexpected.append(f"request #{len(self.requests)}: a tool call was scripted but no tools were sent")
            tool_calls: list[dict[str, Any]] = []
            for name, arguments in reply.tool_calls:
                self._calls += 1
                tool_calls.append({"id": f"call_{self._calls}", "type": "function",
                                   "function": {"name": name, "arguments": arguments}})
        if reply.status != 200:
            return reply.status, _error_body(reply.error_type, reply.error_code, reply.message), reply.headers
        message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
        if tool_calls:
            message["tool_calls"] = tool_calls
        n_prompt = sum(len(str(m.get("content") or "").split()) for m in body.get("messages", []))
        n_completion = len((reply.content or "").split()) + 10 * len(tool_calls)
        return 200, {
            "id": f"chatcmpl-fake{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", MODEL),
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reply.finish_reason,
            }],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_completion,
                      "total_tokens": n_prompt + n_completion},
            "system_fingerprint": "fp_fake",
        }, reply.headers

    def _models(self, path: str, headers: Mapping[str, str], body: Mapping[str, Any]) -> tuple[int, dict[str, Any], Mapping[str, str]]:
        self.model_requests.append(Request(path, headers, body))
        if headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, _error_body("invalid_request_error", "invalid_api_key", "Incorrect API key provided."), {}
        if not self.models_route:
            return 404, _error_body("invalid_request_error", None, f"Invalid URL (GET {path})"), {}

        def card(name: str) -> dict[str, Any]:
            return {"id": name, "object": "model", "created": 0, "owned_by": "fake",
                    **({"max_model_len": self.context} if self.context is not None else {})}

        name = path.removeprefix("/v1/models").strip("/")
        if name:
            if name in self.models:
                return 200, card(name), {}
            return 404, _error_body("invalid_request_error", "model_not_found", f"The model `{name}` does not exist."), {}
        return 200, {"object": "list", "data": [card(m) for m in self.models]}, {}

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



LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


class NetworkGuard:
    """Refuses connections and name lookups for hosts that are not loopback, and remembers them.

    The refusal alone would not fail a test (the LLM programmer turns connection errors into "no
    candidates"), so ``check()``, called by the autouse fixtures at teardown, fails it.
    """

    def __init__(self) -> None:
        self.attempts: list[str] = []

    def install(self, monkeypatch: Any) -> NetworkGuard:
        create_connection, getaddrinfo = socket.create_connection, socket.getaddrinfo
        connect, connect_ex = socket.socket.connect, socket.socket.connect_ex
        guard = self

        def refuse(host: object, how: str) -> None:
            guard.attempts.append(f"{how} {host}")
            raise OSError(f"test network guard: {how} to {host!r} refused; tests must not reach a real provider")

        def host_of(address: object) -> object:
            return address[0] if isinstance(address, tuple) and address else None

        def allowed(host: object) -> bool:
            return host is None or (isinstance(host, (str, bytes)) and
                                    (host.decode() if isinstance(host, bytes) else host) in LOOPBACK)

        def guarded_create_connection(address: Any, *args: Any, **kw: Any) -> socket.socket:
            if not allowed(host_of(address)):
                refuse(host_of(address), "connection")
            return create_connection(address, *args, **kw)

        def guarded_getaddrinfo(host: Any, *args: Any, **kw: Any) -> Any:
            if not allowed(host):
                refuse(host, "name lookup")
            return getaddrinfo(host, *args, **kw)

        def guarded_connect(sock: socket.socket, address: Any) -> None:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and not allowed(host_of(address)):
                refuse(host_of(address), "connection")
            return connect(sock, address)

        def guarded_connect_ex(sock: socket.socket, address: Any) -> int:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and not allowed(host_of(address)):
                refuse(host_of(address), "connection")
            return connect_ex(sock, address)

        monkeypatch.setattr(socket, "create_connection", guarded_create_connection)
        monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
        monkeypatch.setattr(socket.socket, "connect", guarded_connect)
        monkeypatch.setattr(socket.socket, "connect_ex", guarded_connect_ex)
        return self

    def check(self) -> None:
        if self.attempts:
            raise AssertionError("a test tried to reach the network beyond loopback: " + "; ".join(self.attempts))
