"""A local GitHub on loopback HTTP, for PyGithub, checked against GitHub's own OpenAPI description.

Start it, point PyGithub at it, call ``check()`` at teardown::

    fake = FakeGitHub().start()
    gh = fake.client()      # Github(base_url=fake.base_url, auth=Auth.Token("t"), retry=None, ...)
    ...
    fake.stop(); fake.check()

Every request is validated against ``@octokit/openapi`` (``tests/github_spec.py``): the method and
path template exist, path and query parameters are declared and well-typed, and the JSON body
validates against the operation's ``requestBody`` schema. Every JSON response the fake sends is
validated against the operation's schema for that status. Violations are answered like GitHub
would (404 for an unknown route, 422 for a bad request) and recorded; ``check()`` raises with all of
them. Response bodies are built from the description's own examples (so they carry every required
property), with this server's URLs: PyGithub keeps only the path of the URLs it is given.

Endpoints implemented (the ones the bot needs)::

    GET    /repos/{owner}/{repo}
    GET    /repos/{owner}/{repo}/collaborators/{username}/permission
    GET    /repos/{owner}/{repo}/pulls                  ?state=&head=owner:branch&base=&per_page=&page=
    POST   /repos/{owner}/{repo}/pulls
    GET    /repos/{owner}/{repo}/pulls/{pull_number}
    PATCH  /repos/{owner}/{repo}/pulls/{pull_number}
    GET    /repos/{owner}/{repo}/issues/{issue_number}
    GET    /repos/{owner}/{repo}/issues/{issue_number}/comments   (paginated, Link headers)
    POST   /repos/{owner}/{repo}/issues/{issue_number}/comments
    GET    /repos/{owner}/{repo}/issues/comments/{comment_id}
    PATCH  /repos/{owner}/{repo}/issues/comments/{comment_id}
    GET    /repos/{owner}/{repo}/issues/comments/{comment_id}/reactions  (paginated)
    POST   /repos/{owner}/{repo}/issues/comments/{comment_id}/reactions
    GET    /repos/{owner}/{repo}/issues/{issue_number}/labels
    POST   /repos/{owner}/{repo}/issues/{issue_number}/labels   ({"labels": [...]} only: the
           description does not allow the bare array PyGithub's ``add_to_labels`` sends)
    DELETE /repos/{owner}/{repo}/issues/{issue_number}/labels/{name}
    GET    /repos/{owner}/{repo}/git/ref/{ref}       (branches may live in a real git repository:
                                                 ``link_git``)
    POST   /repos/{owner}/{repo}/git/refs
    PATCH  /repos/{owner}/{repo}/git/refs/{ref}
    DELETE /repos/{owner}/{repo}/git/refs/{ref}
    GET    /repos/{owner}/{repo}/actions/runs/{run_id}
    POST   /repos/{owner}/{repo}/actions/runs/{run_id}/cancel      (202; 409 once completed)
    POST   /repos/{owner}/{repo}/statuses/{sha}                    (recorded in ``statuses``)
    POST   /repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers
    GET    /repos/{owner}/{repo}/actions/runs/{run_id}/jobs        ?filter=latest|all (paginated)
    GET    /repos/{owner}/{repo}/actions/runs/{run_id}/artifacts   ?name= (paginated)
    GET    /repos/{owner}/{repo}/actions/artifacts/{artifact_id}/{archive_format}
           -> 302 to a signed URL on a second loopback server (the "blob storage"), as GitHub
           redirects to its storage host: the client must follow it *without* the token (a
           request that carries an Authorization header there is recorded as a violation), and
           an expired or tampered signature gets 403.

Workflow runs, their jobs and artifacts are set up with ``add_run``, ``add_job``/``set_job`` and
``upload_artifact`` (which zips a folder the way actions/upload-artifact v4 does: the folder's
contents at the root of the archive). An ``prefix`` such as ``/api/v3`` serves the API under that
path, as GitHub Enterprise Server does.

Permissions follow GitHub: the stored role (admin, maintain, write, triage, read) is reported as
``role_name``; ``permission`` is the legacy base role (maintain -> write, triage -> read); a user
who is not a collaborator gets 404. Writes are made as ``token_user`` (default
``github-actions[bot]``). Errors are injected with ``fail_next``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import hmac
import io
import json
import re
import subprocess
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

import pytest
from github import Auth, Github
from github_spec import openapi

jsonschema = pytest.importorskip(
    "jsonschema",
    reason="jsonschema is needed to check requests against GitHub's OpenAPI (dev extra)",
)
referencing = pytest.importorskip("referencing")
from referencing.jsonschema import DRAFT4  # noqa: E402

SPEC_URI = "urn:github-openapi"
ROLES = ("admin", "maintain", "write", "triage", "read")
_BASE_PERMISSION = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
}
REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")
BOT_LOGIN = "github-actions[bot]"


# =========================================================================== the description


def _to_jsonschema(node: Any) -> Any:
    """OpenAPI 3.0 schema dialect -> JSON Schema draft 4: ``nullable`` and absolute ``$ref``s."""
    if isinstance(node, list):
        return [_to_jsonschema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_jsonschema(v) for k, v in node.items()}
    ref = out.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        out["$ref"] = SPEC_URI + ref
    if out.get("nullable") is True:
        del out["nullable"]
        if isinstance(out.get("type"), str) and "$ref" not in out:
            out["type"] = [out["type"], "null"]
            if isinstance(out.get("enum"), list) and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


@dataclass(frozen=True)
class Route:
    """One path template of the description."""

    template: str
    regex: re.Pattern[str]
    item: Mapping[str, Any]
    literal: int
    """How many characters of the template are literal (more = more specific)."""


class OpenAPI:
    """GitHub's REST description, turned into a router and request/response validators."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec: dict[str, Any] = _to_jsonschema(spec)
        resource = referencing.Resource.from_contents(self.spec, default_specification=DRAFT4)
        self.registry = referencing.Registry().with_resource(SPEC_URI, resource)
        routes = []
        for template, item in self.spec["paths"].items():
            multi = {
                self.deref(p)["name"]
                for p in item.get("parameters", [])
                + [
                    p
                    for op in item.values()
                    if isinstance(op, dict)
                    for p in op.get("parameters", [])
                ]
                if self.deref(p).get("x-multi-segment")
            }
            pattern = ""
            for part in re.split(r"(\{[^}]+\})", template):
                if part.startswith("{"):
                    name = part[1:-1]
                    pattern += f"(?P<{name.replace('-', '_')}>{'.+' if name in multi else '[^/]+'})"
                else:
                    pattern += re.escape(part)
            literal = len(re.sub(r"\{[^}]+\}", "", template))
            routes.append(Route(template, re.compile(pattern), item, literal))
        routes.sort(key=lambda r: -r.literal)
        self.routes = routes
        self._validators: dict[str, Any] = {}

    def deref(self, node: Any) -> Any:
        """``node`` with its top-level ``$ref`` chain resolved."""
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            assert ref.startswith(SPEC_URI + "#/"), ref
            node = self.spec
            for part in ref[len(SPEC_URI) + 2 :].split("/"):
                node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def route(self, path: str) -> tuple[Route, dict[str, str]] | None:
        for r in self.routes:
            m = r.regex.fullmatch(path)
            if m:
                return r, {k: unquote(v) for k, v in m.groupdict().items()}
        return None

    def parameters(self, route: Route, method: str) -> dict[tuple[str, str], dict[str, Any]]:
        params = route.item.get("parameters", []) + route.item[method].get("parameters", [])
        out = {}
        for p in params:
            p = self.deref(p)
            out[(p["in"], p["name"])] = p
        return out

    def validate(self, schema: Any, instance: Any, where: str) -> list[str]:
        key = json.dumps(schema, sort_keys=True)
        validator = self._validators.get(key)
        if validator is None:
            validator = jsonschema.Draft4Validator(schema, registry=self.registry)
            self._validators[key] = validator
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
        return [
            f"{where}: at /{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}"
            for e in errors[:10]
        ]

    def check_request(
        self,
        method: str,
        path: str,
        query: Mapping[str, list[str]],
        body: Any,
        has_body: bool,
    ) -> tuple[Route | None, dict[str, str], list[str], int]:
        """(route, path params, violations, status to answer with when there are violations)."""
        m = method.lower()
        found = self.route(path)
        if found is None:
            return None, {}, [f"{method} {path}: no such path in GitHub's OpenAPI description"], 404
        route, path_params = found
        if m not in route.item:
            return (
                route,
                path_params,
                [f"{method} {route.template}: method not in the description"],
                404,
            )
        where = f"{method} {route.template}"
        errors: list[str] = []
        declared = self.parameters(route, m)
        for name, value in path_params.items():
            p = declared.get(("path", name))
            if p is None:
                errors.append(f"{where}: path parameter {name} not declared")
                continue
            errors += self._check_value(p, value, f"{where}: path parameter {name}")
        for name, values in query.items():
            p = declared.get(("query", name))
            if p is None:
                errors.append(f"{where}: unknown query parameter {name!r}")
                continue
            for v in values:
                errors += self._check_value(p, v, f"{where}: query parameter {name}")
        for (loc, name), p in declared.items():
            if loc == "query" and p.get("required") and name not in query:
                errors.append(f"{where}: required query parameter {name} missing")
        rb = self.deref(route.item[m].get("requestBody"))
        if rb:
            schema = rb.get("content", {}).get("application/json", {}).get("schema")
            if not has_body:
                if rb.get("required"):
                    errors.append(f"{where}: request body required")
            elif schema is not None:
                errors += self.validate(schema, body, f"{where}: request body")
        elif has_body and body not in (None, {}):
            errors.append(f"{where}: the operation takes no request body")
        return route, path_params, errors, 422

    def _check_value(self, param: Mapping[str, Any], raw: str, where: str) -> list[str]:
        schema = self.deref(param.get("schema", {}))
        value: Any = raw
        kind = schema.get("type")
        if kind == "integer":
            try:
                value = int(raw)
            except ValueError:
                return [f"{where}: {raw!r} is not an integer"]
        elif kind == "boolean":
            if raw not in ("true", "false"):
                return [f"{where}: {raw!r} is not a boolean"]
            value = raw == "true"
        return self.validate(param.get("schema", {}), value, where)

    def check_response(self, method: str, route: Route, status: int, body: Any) -> list[str]:
        responses = route.item[method.lower()].get("responses", {})
        resp = self.deref(responses.get(str(status)))
        where = f"{method} {route.template} -> {status}"
        if resp is None:
            return [f"{where}: status not in the description"]
        schema = resp.get("content", {}).get("application/json", {}).get("schema")
        if schema is None:
            return [] if body is None else [f"{where}: the description has no JSON body here"]
        return self.validate(schema, body, f"{where}: response body")

    def example(self, name: str) -> Any:
        """A deep copy of ``components/examples/<name>``'s value."""
        return copy.deepcopy(self.spec["components"]["examples"][name]["value"])


@functools.lru_cache(maxsize=1)
def description() -> OpenAPI:
    """The shared, prepared description (building it takes a second or two)."""
    return OpenAPI(openapi())


# =========================================================================== state


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class Comment:
    id: int
    repo: str
    issue: int
    body: str
    user: str
    created_at: str
    updated_at: str
    reactions: list[tuple[int, str, str]] = field(default_factory=list)
    """(reaction id, user login, content)."""


@dataclass
class PullState:
    head_ref: str
    head_sha: str
    head_repo: str
    base_ref: str
    base_sha: str
    draft: bool = False
    merged: bool = False
    merged_at: str | None = None
    maintainer_can_modify: bool = False
    reviewers: list[str] = field(default_factory=list)
    """Requested reviewers: user logins, and ``team:<slug>`` for teams."""


@dataclass
class IssueState:
    number: int
    title: str
    body: str | None
    user: str
    state: str = "open"
    labels: list[str] = field(default_factory=list)
    comments: list[int] = field(default_factory=list)
    pull: PullState | None = None
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
    closed_at: str | None = None
    timeline: list[tuple[str, Any]] = field(default_factory=list)
    """In the server's order: ("commented", comment id), ("committed", (sha, git dir or None)) and
    ("head_ref_force_pushed", (event id, sha, time)); what ``GET .../timeline`` lists."""


@dataclass
class RepoState:
    full_name: str
    id: int
    default_branch: str = "main"
    private: bool = False
    fork: bool = False
    parent: str | None = None
    roles: dict[str, str] = field(default_factory=dict)
    """login -> admin | maintain | write | triage | read (or a custom role name with a base)."""
    refs: dict[str, str] = field(default_factory=dict)
    """'heads/main' -> sha."""
    labels: dict[str, str] = field(default_factory=dict)
    """label name -> colour."""
    issues: dict[int, IssueState] = field(default_factory=dict)
    next_number: int = 1
    git_dir: str | None = None
    """A real git repository (usually bare) whose branches are this repository's ``heads/*``
    refs: see :meth:`FakeGitHub.link_git`."""
    activity: list[dict[str, Any]] = field(default_factory=list)
    """Branch updates seen in ``git_dir``, oldest first (``GET /repos/{o}/{r}/activity``)."""

    @property
    def owner(self) -> str:
        return self.full_name.split("/")[0]

    @property
    def name(self) -> str:
        return self.full_name.split("/")[1]


@dataclass
class JobState:
    """One job of a workflow run."""

    id: int
    name: str
    status: str = "queued"
    """queued | in_progress | completed | waiting | requested | pending."""
    conclusion: str | None = None
    created_at: str = field(default_factory=_now)
    started_at: str | None = None
    completed_at: str | None = None
    labels: tuple[str, ...] = ("ubuntu-latest",)


@dataclass
class ArtifactState:
    """One uploaded artifact: its zip archive."""

    id: int
    name: str
    data: bytes
    created_at: str = field(default_factory=_now)
    expired: bool = False


@dataclass
class RunState:
    """A workflow run of a repository."""

    id: int
    repo: str
    head_sha: str
    head_branch: str
    event: str = "pull_request"
    status: str = "in_progress"
    conclusion: str | None = None
    jobs: list[JobState] = field(default_factory=list)
    artifacts: list[ArtifactState] = field(default_factory=list)


@dataclass
class Recorded:
    """One request as received."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    status: int
    template: str | None


@dataclass
class _Failure:
    method: str
    pattern: re.Pattern[str]
    status: int
    times: int
    headers: dict[str, str]
    body: dict[str, Any]


Result = tuple[int, Any, dict[str, str]]
"""A handler's answer: status, JSON body (None for none), extra headers."""


class FakeError(Exception):
    """An HTTP error answer from a handler."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = {
            "message": message,
            "documentation_url": "https://docs.github.com/rest",
            "status": str(status),
            **extra,
        }


# =========================================================================== the server


def _serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A loopback HTTP server on a free port, serving on a daemon thread until shutdown()."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.block_on_close = False
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return server


class FakeGitHub:
    """The fake GitHub: state, an HTTP server on 127.0.0.1, validation, error injection."""

    def __init__(self, *, token_user: str = BOT_LOGIN, prefix: str = "") -> None:
        """``prefix``: serve the API under this path (``/api/v3`` as on GitHub Enterprise Server)."""
        if prefix and (not prefix.startswith("/") or prefix.endswith("/")):
            raise ValueError("prefix must start with '/' and not end with one, e.g. '/api/v3'")
        self.api = description()
        self.token_user = token_user
        self.prefix = prefix
        self.runs: dict[int, RunState] = {}
        self.statuses: list[dict[str, Any]] = []
        """Commit statuses as created, in order (each with ``repo`` and ``sha`` added)."""
        self.blob_requests: list[tuple[str, dict[str, str]]] = []
        """(path, headers) of every request the blob server received."""
        self._blob_secret = b"kernelpro-fake-blob-key"
        self._blob: ThreadingHTTPServer | None = None
        self.blob_url = ""
        self.repos: dict[str, RepoState] = {}
        self.comments: dict[int, Comment] = {}
        self.requests: list[Recorded] = []
        self.errors: list[str] = []
        self._failures: list[_Failure] = []
        self._ids = iter(range(1000, 10**9))
        self._user_ids: dict[str, int] = {}
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self.base_url = ""
        self._routes: dict[tuple[str, str], Callable[..., Result]] = {
            ("GET", "/repos/{owner}/{repo}"): self._get_repo,
            ("GET", "/repos/{owner}/{repo}/collaborators/{username}/permission"): self._permission,
            ("GET", "/repos/{owner}/{repo}/pulls"): self._list_pulls,
            ("POST", "/repos/{owner}/{repo}/pulls"): self._create_pull,
            ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}"): self._get_pull,
            ("PATCH", "/repos/{owner}/{repo}/pulls/{pull_number}"): self._update_pull,
            ("GET", "/repos/{owner}/{repo}/issues/{issue_number}"): self._get_issue,
            ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments"): self._list_comments,
            ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/timeline"): self._list_timeline,
            ("GET", "/repos/{owner}/{repo}/activity"): self._list_activity,
            ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/comments"): self._create_comment,
            ("GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}"): self._get_comment,
            ("PATCH", "/repos/{owner}/{repo}/issues/comments/{comment_id}"): self._update_comment,
            (
                "GET",
                "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions",
            ): self._list_reactions,
            (
                "POST",
                "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions",
            ): self._create_reaction,
            ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/labels"): self._list_labels,
            ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/labels"): self._add_labels,
            (
                "DELETE",
                "/repos/{owner}/{repo}/issues/{issue_number}/labels/{name}",
            ): self._remove_label,
            ("GET", "/repos/{owner}/{repo}/git/ref/{ref}"): self._get_ref,
            ("POST", "/repos/{owner}/{repo}/git/refs"): self._create_ref,
            ("PATCH", "/repos/{owner}/{repo}/git/refs/{ref}"): self._update_ref,
            ("DELETE", "/repos/{owner}/{repo}/git/refs/{ref}"): self._delete_ref,
            ("GET", "/repos/{owner}/{repo}/actions/runs/{run_id}"): self._get_run,
            ("POST", "/repos/{owner}/{repo}/actions/runs/{run_id}/cancel"): self._cancel_run,
            ("POST", "/repos/{owner}/{repo}/statuses/{sha}"): self._create_status,
            (
                "POST",
                "/repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers",
            ): self._request_reviewers,
            ("GET", "/repos/{owner}/{repo}/actions/runs/{run_id}/jobs"): self._list_jobs,
            ("GET", "/repos/{owner}/{repo}/actions/runs/{run_id}/artifacts"): self._list_artifacts,
            (
                "GET",
                "/repos/{owner}/{repo}/actions/artifacts/{artifact_id}/{archive_format}",
            ): self._download_artifact,
        }

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    @contextlib.contextmanager
    def running(cls) -> Iterator[FakeGitHub]:
        """Started for the block; every request checked against the description at the end."""
        fake = cls().start()
        try:
            yield fake
        finally:
            fake.stop()
        fake.check()

    def start(self) -> FakeGitHub:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, headers, payload = fake._handle(self.command, self.path, raw)
                data = b"" if payload is None else json.dumps(payload).encode()
                self.send_response(status)
                if payload is not None:
                    self.send_header("Content-Type", "application/json; charset=utf-8")
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = _serve(Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}{self.prefix}"
        self._start_blob()
        return self

    def _start_blob(self) -> None:
        """The artifact storage: another host as far as HTTP clients are concerned (another port)."""
        fake = self

        class Blob(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                status, data = fake._blob_get(
                    self.path, {k.lower(): v for k, v in self.headers.items()}
                )
                self.send_response(status)
                self.send_header(
                    "Content-Type", "application/zip" if status == 200 else "text/plain"
                )
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._blob = _serve(Blob)
        self.blob_url = f"http://127.0.0.1:{self._blob.server_address[1]}"

    def stop(self) -> None:
        for server in (self._server, self._blob):
            if server is not None:
                server.shutdown()
                server.server_close()
        self._server = self._blob = None

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self, *, per_page: int = 30, token: str = "t") -> Github:
        """PyGithub against this server, with its retries and write throttling off."""
        return Github(
            base_url=self.base_url,
            auth=Auth.Token(token),
            retry=None,
            per_page=per_page,
            seconds_between_requests=None,
            seconds_between_writes=None,
            timeout=10,
        )

    def check(self) -> None:
        """Raise with every violation recorded so far."""
        if self.errors:
            raise AssertionError(
                f"{len(self.errors)} GitHub API violation(s):\n" + "\n".join(self.errors)
            )

    def take_errors(self) -> list[str]:
        """The recorded violations, forgetting them (for tests that provoke some)."""
        with self._lock:
            errors, self.errors = self.errors, []
        return errors

    # ------------------------------------------------------------------ set-up API

    def add_repo(
        self,
        full_name: str,
        *,
        default_branch: str = "main",
        sha: str = "0" * 40,
        private: bool = False,
        fork_of: str | None = None,
    ) -> RepoState:
        """A repository whose default branch points at ``sha``."""
        repo = RepoState(
            full_name,
            next(self._ids),
            default_branch=default_branch,
            private=private,
            fork=fork_of is not None,
            parent=fork_of,
        )
        repo.refs[f"heads/{default_branch}"] = sha
        self.repos[full_name] = repo
        return repo

    def link_git(self, repo: str, git_dir: str | Path) -> None:
        """Back ``repo``'s branches with the real git repository at ``git_dir``.

        Before every request the fake reads that repository's ``refs/heads/*`` into the
        repository's ``heads/*`` refs (a branch deleted there disappears here), and the head SHA of
        every pull request whose head branch lives there follows its branch, as on GitHub after a
        push. Pushes to that repository are how tests move branches.
        """
        self.repos[repo].git_dir = str(git_dir)
        with self._lock:
            self._sync_git()

    def sync_git(self) -> None:
        """Notice pushes to the linked repositories now (each request does too): a test that pushes
        calls it so the push's activity-log time is when it happened, as on GitHub."""
        with self._lock:
            self._sync_git()

    def _sync_git(self) -> None:
        for r in self.repos.values():
            if r.git_dir is None:
                continue
            out = subprocess.run(
                ["git", "--git-dir", r.git_dir, "for-each-ref", "--format=%(refname) %(objectname)",
                 "refs/heads/"],
                check=True, capture_output=True, text=True,
            ).stdout
            heads = {}
            for line in out.splitlines():
                name, _, sha = line.partition(" ")
                heads[name[len("refs/") :]] = sha
            for k in [k for k in r.refs if k.startswith("heads/")]:
                if k not in heads:
                    del r.refs[k]
            for k, sha in heads.items():
                if r.refs.get(k) != sha:
                    self._pushed(r, k, r.refs.get(k), sha)
            r.refs.update(heads)
            for other in self.repos.values():
                for i in other.issues.values():
                    p = i.pull
                    ref = f"heads/{p.head_ref}" if p else ""
                    if p and p.head_repo == r.full_name and ref in heads and i.state == "open":
                        if p.head_sha != heads[ref]:
                            self._head_moved(i, r.git_dir, p.head_sha, heads[ref])
                        p.head_sha = heads[ref]

    def _pushed(self, r: RepoState, ref: str, old: str | None, new: str) -> None:
        """A branch update, as the repository activity API records it (server time)."""
        kind = "branch_creation"
        if old is not None:
            ancestor = subprocess.run(["git", "--git-dir", str(r.git_dir), "merge-base", "--is-ancestor", old, new],
                                      capture_output=True).returncode == 0
            kind = "push" if ancestor else "force_push"
        r.activity.append({"id": next(self._ids), "before": old or "0" * 40, "after": new,
                           "ref": f"refs/{ref}", "timestamp": _now(), "activity_type": kind})

    def _head_moved(self, issue: IssueState, git_dir: str, old: str, new: str) -> None:
        """A push to a pull request's head branch, as GitHub's timeline records it: the new commits
        (a force push first records a head_ref_force_pushed event)."""
        ancestor = subprocess.run(["git", "--git-dir", git_dir, "merge-base", "--is-ancestor", old, new],
                                  capture_output=True).returncode == 0
        if ancestor:
            shas = subprocess.run(["git", "--git-dir", git_dir, "rev-list", "--reverse", f"{old}..{new}"],
                                  check=True, capture_output=True, text=True).stdout.split()
        else:
            issue.timeline.append(("head_ref_force_pushed", (next(self._ids), new, _now())))
            shas = [new]
        issue.timeline.extend(("committed", (sha, git_dir)) for sha in shas)

    def move_head(self, repo: str, number: int, sha: str) -> None:
        """A push to pull request ``number`` of a repository without a linked git repository."""
        with self._lock:
            i = self._issue(repo, number)
            assert i.pull is not None, f"#{number} is not a pull request"
            i.pull.head_sha = sha
            i.timeline.append(("committed", (sha, None)))

    def add_run(
        self,
        repo: str,
        *,
        head_sha: str,
        head_branch: str = "main",
        run_id: int | None = None,
        event: str = "pull_request",
    ) -> RunState:
        """A workflow run of ``repo`` (in progress)."""
        with self._lock:
            run = RunState(run_id or next(self._ids), repo, head_sha, head_branch, event)
            self.runs[run.id] = run
            return run

    def add_job(self, run_id: int, name: str, *, status: str = "queued") -> JobState:
        """A job of run ``run_id`` named ``name`` (as GitHub renders a matrix job's ``name:``)."""
        with self._lock:
            job = JobState(next(self._ids), name)
            self.runs[run_id].jobs.append(job)
            self.set_job(job, status)
            return job

    def set_job(self, job: JobState, status: str, conclusion: str | None = None) -> None:
        """Move ``job`` to ``status`` (``completed`` needs a ``conclusion``), with GitHub's timestamps."""
        if status not in ("queued", "in_progress", "completed", "waiting", "requested", "pending"):
            raise ValueError(f"unknown job status {status!r}")
        if (status == "completed") != (conclusion is not None):
            raise ValueError("a conclusion is given exactly when the job is completed")
        with self._lock:
            job.status, job.conclusion = status, conclusion
            if status in ("in_progress", "completed") and job.started_at is None:
                job.started_at = _now()
            if status == "completed":
                job.completed_at = _now()

    def upload_artifact(self, run_id: int, name: str, folder: Path) -> ArtifactState:
        """Zip ``folder`` as actions/upload-artifact v4 does (its contents at the archive's root)
        and attach it to run ``run_id``; it is listed at once, before the run ends."""
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for f in sorted(Path(folder).rglob("*")):
                if f.is_file():
                    z.write(f, f.relative_to(folder).as_posix())
        return self.upload_artifact_bytes(run_id, name, buf.getvalue())

    def upload_artifact_bytes(self, run_id: int, name: str, data: bytes) -> ArtifactState:
        """An artifact whose archive is exactly ``data`` (for hostile archives)."""
        with self._lock:
            run = self.runs[run_id]
            if any(a.name == name for a in run.artifacts):
                raise ValueError(f"an artifact named {name!r} already exists in run {run_id} "
                                 "(upload-artifact v4 refuses a second upload under one name)")
            art = ArtifactState(next(self._ids), name, data)
            run.artifacts.append(art)
            return art

    def set_role(self, repo: str, login: str, role: str | None) -> None:
        """Give ``login`` a role on ``repo`` (admin|maintain|write|triage|read); None removes it."""
        if role is None:
            self.repos[repo].roles.pop(login, None)
        else:
            if role not in ROLES:
                raise ValueError(f"unknown role {role!r}")
            self.repos[repo].roles[login] = role

    def add_pull(
        self,
        repo: str,
        *,
        head_ref: str,
        head_sha: str,
        base_ref: str = "main",
        base_sha: str | None = None,
        head_repo: str | None = None,
        title: str = "A pull request",
        body: str | None = "",
        user: str = "octocat",
        labels: tuple[str, ...] = (),
    ) -> IssueState:
        """A pull request; ``head_repo`` (default: ``repo``) another repository makes it a fork PR."""
        r = self.repos[repo]
        head_repo = head_repo or repo
        if head_repo not in self.repos:
            self.add_repo(head_repo, fork_of=repo)
        self.repos[head_repo].refs[f"heads/{head_ref}"] = head_sha
        pull = PullState(
            head_ref=head_ref,
            head_sha=head_sha,
            head_repo=head_repo,
            base_ref=base_ref,
            base_sha=base_sha or r.refs.get(f"heads/{base_ref}", "0" * 40),
        )
        issue = IssueState(r.next_number, title, body, user, labels=list(labels), pull=pull)
        issue.timeline.append(("committed", (head_sha, self.repos[head_repo].git_dir)))
        for name in labels:
            r.labels.setdefault(name, "ededed")
        r.issues[issue.number] = issue
        r.next_number += 1
        return issue

    def close_pull(self, repo: str, number: int, *, merged: bool = False) -> None:
        """A person closes pull request ``number`` (merging it when ``merged``), as in the web UI."""
        with self._lock:
            i = self._issue(repo, number)
            assert i.pull is not None, f"#{number} is not a pull request"
            i.state, i.closed_at = "closed", _now()
            if merged:
                i.pull.merged, i.pull.merged_at = True, i.closed_at

    def add_issue(self, repo: str, *, title: str = "An issue", user: str = "octocat") -> IssueState:
        r = self.repos[repo]
        issue = IssueState(r.next_number, title, "", user)
        r.issues[issue.number] = issue
        r.next_number += 1
        return issue

    def add_comment(self, repo: str, number: int, body: str, *, user: str = "octocat") -> Comment:
        with self._lock:
            self._sync_git()  # a push made before this comment comes before it in the timeline
            issue = self._issue(repo, number)
            now = _now()
            c = Comment(next(self._ids), repo, number, body, user, now, now)
            self.comments[c.id] = c
            issue.comments.append(c.id)
            issue.timeline.append(("commented", c.id))
            return c

    def fail_next(
        self,
        method: str,
        path_regex: str,
        status: int | str,
        times: int = 1,
        *,
        message: str | None = None,
        retry_after: int = 60,
    ) -> None:
        """Answer the next ``times`` matching requests with an error instead of handling them.

        ``status`` is an HTTP status (403, 404, 422, 500, ...) or ``"rate-limit"``: a 403 with
        ``x-ratelimit-remaining: 0`` and ``retry-after``, as GitHub sends when a token runs dry.
        ``path_regex`` is searched in the request path (without the query string).
        """
        headers: dict[str, str] = {}
        if status == "rate-limit":
            code = 403
            reset = int(time.time()) + retry_after
            headers = {
                "x-ratelimit-limit": "5000",
                "x-ratelimit-remaining": "0",
                "x-ratelimit-used": "5000",
                "x-ratelimit-reset": str(reset),
                "retry-after": str(retry_after),
            }
            msg = message or "API rate limit exceeded for installation ID 1."
        elif isinstance(status, int):
            code = status
            msg = message or {
                403: "Resource not accessible by integration",
                404: "Not Found",
                409: "Conflict",
                422: "Validation Failed",
                500: "Server Error",
                502: "Bad Gateway",
                503: "Service Unavailable",
            }.get(status, "Error")
        else:
            raise ValueError(f"status must be an int or 'rate-limit', not {status!r}")
        body = FakeError(code, msg).body
        with self._lock:
            self._failures.append(
                _Failure(method.upper(), re.compile(path_regex), code, times, headers, body)
            )

    # ------------------------------------------------------------------ dispatch

    def _handle(self, method: str, target: str, raw: bytes) -> tuple[int, dict[str, str], Any]:
        split = urlsplit(target)  # PyGithub may send absolute URLs
        path = split.path
        if self.prefix:
            if not path.startswith(self.prefix + "/"):
                with self._lock:
                    self.errors.append(f"{method} {path}: outside the API prefix {self.prefix}")
                    return self._record(
                        method, path, {}, None, None, 404, {}, FakeError(404, "Not Found").body
                    )
            path = path[len(self.prefix) :]
        query = parse_qs(split.query, keep_blank_values=True)
        has_body = bool(raw.strip())
        body: Any = None
        with self._lock:
            self._sync_git()
            if has_body:
                try:
                    body = json.loads(raw)
                except ValueError:
                    self.errors.append(f"{method} {path}: request body is not JSON")
                    return self._record(
                        method,
                        path,
                        query,
                        raw,
                        None,
                        400,
                        {},
                        {"message": "Problems parsing JSON"},
                    )
            route, params, violations, code = self.api.check_request(
                method, path, query, body, has_body
            )
            template = route.template if route else None
            if violations:
                self.errors += violations
                err = FakeError(code, "Invalid request.\n\n" + "\n".join(violations)).body
                return self._record(method, path, query, body, template, code, {}, err)
            assert route is not None
            for f in self._failures:
                if f.method == method and f.pattern.search(path):
                    f.times -= 1
                    if f.times <= 0:
                        self._failures.remove(f)
                    return self._record(
                        method, path, query, body, template, f.status, f.headers, f.body
                    )
            handler = self._routes.get((method, route.template))
            if handler is None:
                self.errors.append(f"{method} {route.template}: not implemented by the fake")
                err = FakeError(501, "not implemented by the fake GitHub").body
                return self._record(method, path, query, body, template, 501, {}, err)
            try:
                status, payload, headers = handler(params, query, body)
            except FakeError as exc:
                status, payload, headers = exc.status, exc.body, {}
            except Exception as exc:  # a bug in the fake: make it loud
                self.errors.append(f"{method} {path}: fake crashed: {exc!r}")
                status, payload, headers = 500, FakeError(500, repr(exc)).body, {}
            if status < 400:
                self.errors += self.api.check_response(method, route, status, payload)
            return self._record(method, path, query, body, template, status, headers, payload)

    def _record(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        body: Any,
        template: str | None,
        status: int,
        headers: dict[str, str],
        payload: Any,
    ) -> tuple[int, dict[str, str], Any]:
        self.requests.append(Recorded(method, path, query, body, status, template))
        return status, headers, payload

    # ------------------------------------------------------------------ lookups

    def _repo(self, p: Mapping[str, str]) -> RepoState:
        full = f"{p['owner']}/{p['repo']}"
        for name, repo in self.repos.items():
            if name.lower() == full.lower():
                return repo
        raise FakeError(404, "Not Found")

    def _issue(self, repo: str | RepoState, number: int) -> IssueState:
        r = repo if isinstance(repo, RepoState) else self.repos[repo]
        if number not in r.issues:
            raise FakeError(404, "Not Found")
        return r.issues[number]

    def _pull(self, p: Mapping[str, str]) -> tuple[RepoState, IssueState]:
        r = self._repo(p)
        issue = self._issue(r, int(p["pull_number"]))
        if issue.pull is None:
            raise FakeError(404, "Not Found")
        return r, issue

    def _comment(self, p: Mapping[str, str]) -> Comment:
        r = self._repo(p)
        c = self.comments.get(int(p["comment_id"]))
        if c is None or c.repo != r.full_name:
            raise FakeError(404, "Not Found")
        return c

    def _page(
        self, path: str, query: Mapping[str, list[str]], items: list[Any]
    ) -> tuple[list[Any], dict[str, str]]:
        per_page = int(query.get("per_page", ["30"])[0])
        page = int(query.get("page", ["1"])[0])
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        links = []
        rest = {k: v[0] for k, v in query.items() if k not in ("page", "per_page")}

        def url(n: int) -> str:
            return f"{self.base_url}{path}?{urlencode({**rest, 'per_page': per_page, 'page': n})}"

        if page > 1:
            links += [f'<{url(page - 1)}>; rel="prev"', f'<{url(1)}>; rel="first"']
        if page < last:
            links += [f'<{url(page + 1)}>; rel="next"', f'<{url(last)}>; rel="last"']
        return chunk, ({"Link": ", ".join(links)} if links else {})

    # ------------------------------------------------------------------ JSON shapes

    def _rebase(self, obj: Any, full_name: str) -> Any:
        """Example URLs -> this server's (API) and this repository's."""
        if isinstance(obj, dict):
            return {k: self._rebase(v, full_name) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self._rebase(v, full_name) for v in obj]
        if isinstance(obj, str):
            return obj.replace("https://api.github.com", self.base_url).replace(
                "octocat/Hello-World", full_name
            )
        return obj

    def user_json(self, login: str) -> dict[str, Any]:
        uid = self._user_ids.setdefault(login, len(self._user_ids) + 1)
        is_bot = login.endswith("[bot]")
        u = self.api.example("issue-comment")["user"]
        for k, v in list(u.items()):
            if isinstance(v, str):
                u[k] = v.replace("https://api.github.com", self.base_url).replace(
                    "octocat", quote(login)
                )
        u.update(login=login, id=uid, node_id=f"U_{uid}", type="Bot" if is_bot else "User")
        u["html_url"] = f"https://github.com/{login}"
        return u

    def repo_json(self, r: RepoState) -> dict[str, Any]:
        body = self._rebase(self.api.example("full-repository"), r.full_name)
        body.update(
            id=r.id,
            node_id=f"R_{r.id}",
            name=r.name,
            full_name=r.full_name,
            owner=self.user_json(r.owner),
            private=r.private,
            fork=r.fork,
            default_branch=r.default_branch,
            url=f"{self.base_url}/repos/{r.full_name}",
            html_url=f"https://github.com/{r.full_name}",
            license=None,
            has_discussions=False,
        )
        for key in ("parent", "source", "organization", "template_repository"):
            body.pop(key, None)
        if r.parent and r.parent in self.repos:
            body["parent"] = body["source"] = self._short_repo(self.repos[r.parent])
        return body

    @functools.cache  # noqa: B019 - one fake, a handful of calls
    def _repo_keys(self) -> frozenset[str]:
        schema = self.api.deref({"$ref": SPEC_URI + "#/components/schemas/repository"})
        return frozenset(schema["properties"])

    def _short_repo(self, r: RepoState) -> dict[str, Any]:
        """A ``repository`` object (as in a PR's head/base)."""
        full = self.repo_json(r)
        return {k: v for k, v in full.items() if k in self._repo_keys()}

    def label_json(self, r: RepoState, name: str) -> dict[str, Any]:
        body = self.api.example("label")
        body.update(
            id=abs(hash((r.full_name, name))) % 10**9,
            node_id=f"LA_{name}",
            url=f"{self.base_url}/repos/{r.full_name}/labels/{quote(name)}",
            name=name,
            color=r.labels.get(name, "ededed"),
            default=False,
            description="",
        )
        return body

    def issue_json(self, r: RepoState, i: IssueState) -> dict[str, Any]:
        body = self._rebase(self.api.example("issue"), r.full_name)
        url = f"{self.base_url}/repos/{r.full_name}/issues/{i.number}"
        body.update(
            id=i.number + r.id * 100000,
            node_id=f"I_{r.id}_{i.number}",
            url=url,
            repository_url=f"{self.base_url}/repos/{r.full_name}",
            labels_url=url + "/labels{/name}",
            comments_url=url + "/comments",
            events_url=url + "/events",
            html_url=f"https://github.com/{r.full_name}/{'pull' if i.pull else 'issues'}/{i.number}",
            number=i.number,
            state=i.state,
            title=i.title,
            body=i.body,
            user=self.user_json(i.user),
            labels=[self.label_json(r, n) for n in i.labels],
            assignee=None,
            assignees=[],
            milestone=None,
            comments=len(i.comments),
            created_at=i.created_at,
            updated_at=i.updated_at,
            closed_at=i.closed_at,
            closed_by=None,
            author_association="CONTRIBUTOR",
        )
        body.pop("repository", None)
        if i.pull:
            body["pull_request"] = {
                "url": f"{self.base_url}/repos/{r.full_name}/pulls/{i.number}",
                "html_url": f"https://github.com/{r.full_name}/pull/{i.number}",
                "diff_url": f"https://github.com/{r.full_name}/pull/{i.number}.diff",
                "patch_url": f"https://github.com/{r.full_name}/pull/{i.number}.patch",
                "merged_at": None,
            }
        else:
            body.pop("pull_request", None)
        return body

    def pull_json(self, r: RepoState, i: IssueState) -> dict[str, Any]:
        assert i.pull is not None
        p = i.pull
        body = self._rebase(self.api.example("pull-request"), r.full_name)
        url = f"{self.base_url}/repos/{r.full_name}/pulls/{i.number}"
        issue_url = f"{self.base_url}/repos/{r.full_name}/issues/{i.number}"
        head_repo = self.repos[p.head_repo]
        body.update(
            url=url,
            id=i.number + r.id * 100000,
            node_id=f"PR_{r.id}_{i.number}",
            html_url=f"https://github.com/{r.full_name}/pull/{i.number}",
            diff_url=f"https://github.com/{r.full_name}/pull/{i.number}.diff",
            patch_url=f"https://github.com/{r.full_name}/pull/{i.number}.patch",
            issue_url=issue_url,
            commits_url=url + "/commits",
            review_comments_url=url + "/comments",
            review_comment_url=f"{self.base_url}/repos/{r.full_name}/pulls/comments{{/number}}",
            comments_url=issue_url + "/comments",
            statuses_url=f"{self.base_url}/repos/{r.full_name}/statuses/{p.head_sha}",
            number=i.number,
            state=i.state,
            locked=False,
            title=i.title,
            body=i.body,
            user=self.user_json(i.user),
            labels=[self.label_json(r, n) for n in i.labels],
            milestone=None,
            assignee=None,
            assignees=[],
            requested_reviewers=[self.user_json(u) for u in p.reviewers if not u.startswith("team:")],
            requested_teams=[],
            created_at=i.created_at,
            updated_at=i.updated_at,
            closed_at=i.closed_at,
            merged_at=p.merged_at,
            merge_commit_sha=None,
            draft=p.draft,
            merged=p.merged,
            mergeable=None,
            rebaseable=None,
            mergeable_state="unknown",
            merged_by=None,
            comments=len(i.comments),
            maintainer_can_modify=p.maintainer_can_modify,
            author_association="CONTRIBUTOR",
            auto_merge=None,
            active_lock_reason=None,
        )
        body["head"] = {
            "label": f"{head_repo.owner}:{p.head_ref}",
            "ref": p.head_ref,
            "sha": p.head_sha,
            "user": self.user_json(head_repo.owner),
            "repo": self._short_repo(head_repo),
        }
        body["base"] = {
            "label": f"{r.owner}:{p.base_ref}",
            "ref": p.base_ref,
            "sha": p.base_sha,
            "user": self.user_json(r.owner),
            "repo": self._short_repo(r),
        }
        body["_links"] = {
            k: {"href": v}
            for k, v in {
                "self": url,
                "html": body["html_url"],
                "issue": issue_url,
                "comments": issue_url + "/comments",
                "review_comments": url + "/comments",
                "review_comment": body["review_comment_url"],
                "commits": url + "/commits",
                "statuses": body["statuses_url"],
            }.items()
        }
        return body

    def comment_json(self, c: Comment) -> dict[str, Any]:
        body = self._rebase(self.api.example("issue-comment"), c.repo)
        counts = {k: sum(1 for _, _, x in c.reactions if x == k) for k in REACTIONS}
        body.update(
            id=c.id,
            node_id=f"IC_{c.id}",
            url=f"{self.base_url}/repos/{c.repo}/issues/comments/{c.id}",
            html_url=f"https://github.com/{c.repo}/pull/{c.issue}#issuecomment-{c.id}",
            issue_url=f"{self.base_url}/repos/{c.repo}/issues/{c.issue}",
            body=c.body,
            user=self.user_json(c.user),
            created_at=c.created_at,
            updated_at=c.updated_at,
            author_association="CONTRIBUTOR",
            reactions={
                "url": f"{self.base_url}/repos/{c.repo}/issues/comments/{c.id}/reactions",
                "total_count": len(c.reactions),
                **counts,
            },
        )
        body.pop("performed_via_github_app", None)
        return body

    def timeline_json(self, r: RepoState, kind: str, x: Any) -> dict[str, Any]:
        """One item of an issue's timeline (``timeline-issue-events``)."""
        if kind == "commented":
            c = self.comments[x]
            body = self.comment_json(c)
            body.pop("reactions", None)
            return {**body, "event": "commented", "actor": self.user_json(c.user)}
        if kind == "head_ref_force_pushed":
            eid, sha, when = x
            return {"id": eid, "node_id": f"HRFPE_{eid}", "url": f"{self.base_url}/repos/{r.full_name}/issues/events/{eid}",
                    "actor": self.user_json("octocat"), "event": kind, "commit_id": sha,
                    "commit_url": f"{self.base_url}/repos/{r.full_name}/commits/{sha}", "created_at": when,
                    "performed_via_github_app": None}
        sha, git_dir = x
        fields = ["Monalisa Octocat", "octocat@example.com", "1970-01-01T00:00:00Z"] * 2 + ["commit", "0" * 40, ""]
        if git_dir is not None:
            out = subprocess.run(["git", "--git-dir", git_dir, "show", "-s",
                                  "--format=%an%x00%ae%x00%aI%x00%cn%x00%ce%x00%cI%x00%s%x00%T%x00%P", sha],
                                 capture_output=True, text=True)
            if out.returncode == 0:
                fields = out.stdout.rstrip("\n").split("\0")
        an, ae, ad, cn, ce, cd, msg, tree, parents = fields
        url = f"{self.base_url}/repos/{r.full_name}/git/commits"
        return {"event": "committed", "sha": sha, "node_id": f"C_{sha}", "url": f"{url}/{sha}",
                "html_url": f"https://github.com/{r.full_name}/commit/{sha}",
                "author": {"name": an, "email": ae, "date": ad}, "committer": {"name": cn, "email": ce, "date": cd},
                "message": msg, "tree": {"sha": tree, "url": f"{self.base_url}/repos/{r.full_name}/git/trees/{tree}"},
                "parents": [{"sha": s, "url": f"{url}/{s}", "html_url": f"https://github.com/{r.full_name}/commit/{s}"}
                            for s in parents.split()],
                "verification": {"verified": False, "reason": "unsigned", "signature": None, "payload": None,
                                 "verified_at": None}}

    def reaction_json(self, rid: int, login: str, content: str) -> dict[str, Any]:
        body = self.api.example("reaction")
        body.update(id=rid, node_id=f"REA_{rid}", user=self.user_json(login), content=content)
        return body

    def ref_json(self, r: RepoState, ref: str) -> dict[str, Any]:
        sha = r.refs[ref]
        return {
            "ref": f"refs/{ref}",
            "node_id": f"REF_{r.id}_{ref}",
            "url": f"{self.base_url}/repos/{r.full_name}/git/refs/{ref}",
            "object": {
                "type": "commit",
                "sha": sha,
                "url": f"{self.base_url}/repos/{r.full_name}/git/commits/{sha}",
            },
        }

    # ------------------------------------------------------------------ handlers
    # Each takes (path params, query, body) and returns (status, JSON, extra headers).

    def _get_repo(self, p: Mapping[str, str], q: Any, b: Any) -> Result:
        return 200, self.repo_json(self._repo(p)), {}

    def _permission(self, p: Mapping[str, str], q: Any, b: Any) -> Result:
        r = self._repo(p)
        login = p["username"]
        role = next((v for k, v in r.roles.items() if k.lower() == login.lower()), None)
        if role is None:
            raise FakeError(404, f"{login} is not a user")
        user = self.user_json(login)
        user["permissions"] = {
            "admin": role == "admin",
            "maintain": role in ("admin", "maintain"),
            "push": role in ("admin", "maintain", "write"),
            "triage": role != "read",
            "pull": True,
        }
        user["role_name"] = role
        return 200, {"permission": _BASE_PERMISSION[role], "role_name": role, "user": user}, {}

    def _list_pulls(self, p: Mapping[str, str], q: Mapping[str, list[str]], b: Any) -> Result:
        r = self._repo(p)
        state = q.get("state", ["open"])[0]
        head = q.get("head", [None])[0]
        base = q.get("base", [None])[0]
        found = []
        for i in sorted(r.issues.values(), key=lambda i: -i.number):
            if i.pull is None or (state != "all" and i.state != state):
                continue
            if base is not None and i.pull.base_ref != base:
                continue
            if head is not None:
                owner, _, branch = head.partition(":")
                if not branch:  # GitHub wants user:ref; a bare ref matches nothing useful
                    owner, branch = r.owner, owner
                if (self.repos[i.pull.head_repo].owner.lower(), i.pull.head_ref) != (
                    owner.lower(),
                    branch,
                ):
                    continue
            found.append(self.pull_json(r, i))
        chunk, headers = self._page(f"/repos/{r.full_name}/pulls", q, found)
        return 200, chunk, headers

    def _find_head(self, r: RepoState, head: str, head_repo: str | None) -> tuple[RepoState, str]:
        owner, _, branch = head.partition(":")
        if not branch:
            owner, branch = r.owner, owner
        if head_repo:
            hr = self.repos.get(head_repo)
        else:
            hr = next(
                (x for x in self.repos.values() if x.owner == owner and x.name == r.name), None
            )
        if hr is None or f"heads/{branch}" not in hr.refs:
            raise FakeError(
                422,
                "Validation Failed",
                errors=[{"resource": "PullRequest", "field": "head", "code": "invalid"}],
            )
        return hr, branch

    def _create_pull(self, p: Mapping[str, str], q: Any, b: Mapping[str, Any]) -> Result:
        r = self._repo(p)
        hr, branch = self._find_head(r, b["head"], b.get("head_repo"))
        base = b["base"]
        if f"heads/{base}" not in r.refs:
            raise FakeError(
                422,
                "Validation Failed",
                errors=[{"resource": "PullRequest", "field": "base", "code": "invalid"}],
            )
        for i in r.issues.values():
            if (
                i.pull
                and i.state == "open"
                and i.pull.head_repo == hr.full_name
                and i.pull.head_ref == branch
                and i.pull.base_ref == base
            ):
                raise FakeError(
                    422,
                    "Validation Failed",
                    errors=[
                        {
                            "resource": "PullRequest",
                            "code": "custom",
                            "message": f"A pull request already exists for {hr.owner}:{branch}.",
                        }
                    ],
                )
        issue = IssueState(
            r.next_number,
            b.get("title") or "",
            b.get("body"),
            self.token_user,
            pull=PullState(
                head_ref=branch,
                head_sha=hr.refs[f"heads/{branch}"],
                head_repo=hr.full_name,
                base_ref=base,
                base_sha=r.refs[f"heads/{base}"],
                draft=bool(b.get("draft", False)),
                maintainer_can_modify=bool(b.get("maintainer_can_modify", False)),
            ),
        )
        r.issues[issue.number] = issue
        r.next_number += 1
        return 201, self.pull_json(r, issue), {}

    def _get_pull(self, p: Mapping[str, str], q: Any, b: Any) -> Result:
        r, i = self._pull(p)
        return 200, self.pull_json(r, i), {}

    def _update_pull(self, p: Mapping[str, str], q: Any, b: Mapping[str, Any]) -> Result:
        r, i = self._pull(p)
        assert i.pull is not None
        if "title" in b:
            i.title = b["title"]
        if "body" in b:
            i.body = b["body"]
        if "state" in b:
            i.state = b["state"]
            i.closed_at = _now() if i.state == "closed" else None
        if "base" in b:
            if f"heads/{b['base']}" not in r.refs:
                raise FakeError(422, "Validation Failed")
            i.pull.base_ref = b["base"]
            i.pull.base_sha = r.refs[f"heads/{b['base']}"]
        if "maintainer_can_modify" in b:
            i.pull.maintainer_can_modify = b["maintainer_can_modify"]
        i.updated_at = _now()
        return 200, self.pull_json(r, i), {}

    def _get_issue(self, p: Mapping[str, str], q: Any, b: Any) -> Result:
        r = self._repo(p)
        return 200, self.issue_json(r, self._issue(r, int(p["issue_number"]))), {}

    def _list_comments(self, p: Mapping[str, str], q: Mapping[str, list[str]], b: Any) -> Result:
        r = self._repo(p)
        i = self._issue(r, int(p["issue_number"]))
        items = [self.comment_json(self.comments[c]) for c in i.comments]
        chunk, headers = self._page(f"/repos/{r.full_name}/issues/{i.number}/comments", q, items)
        return 200, chunk, headers

    def _list_timeline(self, p: Mapping[str, str], q: Mapping[str, list[str]], b: Any) -> Result:
        r = self._repo(p)
        i = self._issue(r, int(p["issue_number"]))
        items = [self.timeline_json(r, kind, x) for kind, x in i.timeline if kind != "commented" or x in self.comments]
        chunk, headers = self._page(f"/repos/{r.full_name}/issues/{i.number}/timeline", q, items)
        return 200, chunk, headers

    def _list_activity(self, p: Mapping[str, str], q: Mapping[str, list[str]], b: Any) -> Result:
        r = self._repo(p)
        ref = q.get("ref", [None])[0]
        kinds = q.get("activity_type", [None])[0]
        items = [a for a in r.activity
                 if (ref is None or a["ref"] in (ref, f"refs/heads/{ref}")) and (kinds is None or a["activity_type"] == kinds)]
        if q.get("direction", ["desc"])[0] == "desc":
            items = items[::-1]
        per_page = int(q.get("per_page", ["30"])[0])
        out = [{**a, "node_id": f"RA_{a['id']}", "actor": self.user_json("octocat")} for a in items[:per_page]]
        return 200, out, {}

    def _create_comment(self, p: Mapping[str, str], q: Any, b: Mapping[str, Any]) -> Result:
        r = self._repo(p)
        c = self.add_comment(r.full_name, int(p["issue_number"]), b["body"], user=self.token_user)
        return 201, self.comment_json(c), {}

    def _get_comment(self, p: Mapping[str, str], q: Any, b: Any) -> Result:
        return 200, self.comment_json(self._comment(p)), {}

    def _update_comment(self, p: Mapping[str, str], q: Any, b: Mapping[str, Any]) -> Result:
        c = self._comment(p)
        if c.user != self.token_user:
            raise FakeError(403, "Resource not accessible by integration")
        c.body = b["body"]
        c.updated_at = _now()
        return 200, self.comment_json(c), {}

    def _list_reactions(self, p: Mapping[str, str], q: Mapping[str, list[str]], b: Any) -> Result:
        c = self._comment(p)
        content = q.get("content", [None])[0]
        items = [self.reaction_json(*x) for x in c.reactions if content is None or x[2] == content]
        chunk, headers = self._page(f"/repos/{c.repo}/issues/comments/{c.id}/reactions", q, items)
        return 200, chunk, headers

    def _create_reaction(self, p: Mapping[str, str], q: Any, b: Mapping[str, Any]) -> Result:
        c = self._comment(p)
        for x in c.reactions:
            if x[1] == self.token_user and x[2] == b["content"]:
                return 200, self.reaction_json(*x), {}
        x = (next(self._ids), self.token_user, b["content"])
        c.reactions.append(x)
        return 201, self.reaction_json(*x), {}

    def _list_labels(self, p: Mapping[str, str], q: Mapping[str, list[str]], b: Any) -> Result:
        r = self._repo(p)
        i = self._issue(r, int(p["issue_number"]))
        items = [self.label_json(r, n) for n in i.labels]
        chunk, headers = self._page(f"/repos/{r.full_name}/issues/{i.number}/labels", q, items)
        return 200, chunk, headers

    def _add_labels(self, p: Mapping[str, str], q: Any, b: Any) -> Result:
        r = self._repo(p)
        i = self._issue(r, int(p["issue_number"]))
        for item in b["labels"]:
            name = item if isinstance(item, str) else item["name"]
            r.labels.setdefault(name, "ededed")
            if name not in i.labels:
                i.labels.append(name)
        return 200, [self.label_json(r, n) for n in i.labels], {}

    def _remove_label(self, p: Mapping[str, str], q: Any, b: Any) -> Result:
        r = self._repo(p)
        i = self._issue(r, int(p["issue_number"]))
        if p["name"] not in i.labels:
            raise FakeError(404, "Label does not exist")
        i.labels.remove(p["name"])
        return 200, [self.label_json(r, n) for n in i.labels], {}

    def _get_ref(self, p: Mapping[str, str], q: Any, b: Any) -> Result:
        r = self._repo(p)
        if p["ref"] not in r.refs:
            raise FakeError(404, "Not Found")
        return 200, self.ref_json(r, p["ref"]), {}

    def _create_ref(self, p: Mapping[str, str], q: Any, b: Mapping[str, Any]) -> Result:
        r = self._repo(p)
        ref = b["ref"]
        if not ref.startswith("refs/") or ref.count("/") < 2:
            raise FakeError(422, "Reference name must start with 'refs/' and have two slashes")
        short = ref[len("refs/") :]
        if short in r.refs:
            raise FakeError(422, "Reference already exists")
        r.refs[short] = b["sha"]
        return 201, self.ref_json(r, short), {}

    def _update_ref(self, p: Mapping[str, str], q: Any, b: Mapping[str, Any]) -> Result:
        r = self._repo(p)
        if p["ref"] not in r.refs:
            raise FakeError(422, "Reference does not exist")
        # The fake holds no commit graph: a non-forced update is accepted as a fast-forward.
        r.refs[p["ref"]] = b["sha"]
        return 200, self.ref_json(r, p["ref"]), {}

    def _delete_ref(self, p: Mapping[str, str], q: Any, b: Any) -> Result:
        r = self._repo(p)
        if p["ref"] not in r.refs:
            raise FakeError(422, "Reference does not exist")
        del r.refs[p["ref"]]
        return 204, None, {}

    # ------------------------------------------------------------------ Actions: runs, jobs, artifacts

    def _run(self, p: Mapping[str, str]) -> tuple[RepoState, RunState]:
        r = self._repo(p)
        run = self.runs.get(int(p["run_id"]))
        if run is None or run.repo != r.full_name:
            raise FakeError(404, "Not Found")
        return r, run

    def run_json(self, r: RepoState, run: RunState) -> dict[str, Any]:
        body = self._rebase(self.api.example("workflow-run"), r.full_name)
        url = f"{self.base_url}/repos/{r.full_name}/actions/runs/{run.id}"
        body.update(
            id=run.id,
            node_id=f"WFR_{run.id}",
            head_branch=run.head_branch,
            head_sha=run.head_sha,
            event=run.event,
            status=run.status,
            conclusion=run.conclusion,
            url=url,
            html_url=f"https://github.com/{r.full_name}/actions/runs/{run.id}",
            jobs_url=url + "/jobs",
            logs_url=url + "/logs",
            artifacts_url=url + "/artifacts",
            cancel_url=url + "/cancel",
            rerun_url=url + "/rerun",
            pull_requests=[],
            repository=self._short_min_repo(r),
            head_repository=self._short_min_repo(r),
        )
        body.pop("previous_attempt_url", None)
        return body

    def _short_min_repo(self, r: RepoState) -> dict[str, Any]:
        body = self._rebase(self.api.example("workflow-run")["repository"], r.full_name)
        body.update(id=r.id, node_id=f"R_{r.id}", name=r.name, full_name=r.full_name,
                    owner=self.user_json(r.owner), private=r.private, fork=r.fork,
                    url=f"{self.base_url}/repos/{r.full_name}",
                    html_url=f"https://github.com/{r.full_name}")
        return body

    def job_json(self, r: RepoState, run: RunState, job: JobState) -> dict[str, Any]:
        body = self._rebase(self.api.example("job"), r.full_name)
        body.update(
            id=job.id,
            run_id=run.id,
            run_url=f"{self.base_url}/repos/{r.full_name}/actions/runs/{run.id}",
            node_id=f"J_{job.id}",
            head_sha=run.head_sha,
            head_branch=run.head_branch,
            url=f"{self.base_url}/repos/{r.full_name}/actions/jobs/{job.id}",
            html_url=f"https://github.com/{r.full_name}/actions/runs/{run.id}/job/{job.id}",
            status=job.status,
            conclusion=job.conclusion,
            created_at=job.created_at,
            started_at=job.started_at or job.created_at,
            completed_at=job.completed_at,
            name=job.name,
            steps=[],
            check_run_url=f"{self.base_url}/repos/{r.full_name}/check-runs/{job.id}",
            labels=list(job.labels),
            runner_id=None if job.status == "queued" else 1,
            runner_name=None if job.status == "queued" else "runner-1",
            runner_group_id=None if job.status == "queued" else 1,
            runner_group_name=None if job.status == "queued" else "Default",
            workflow_name="kernelpro",
        )
        return body

    def artifact_json(self, r: RepoState, run: RunState, a: ArtifactState) -> dict[str, Any]:
        url = f"{self.base_url}/repos/{r.full_name}/actions/artifacts/{a.id}"
        return {
            "id": a.id,
            "node_id": f"A_{a.id}",
            "name": a.name,
            "size_in_bytes": len(a.data),
            "url": url,
            "archive_download_url": url + "/zip",
            "expired": a.expired,
            "created_at": a.created_at,
            "expires_at": "2099-01-01T00:00:00Z",
            "updated_at": a.created_at,
            "digest": "sha256:" + hashlib.sha256(a.data).hexdigest(),
            "workflow_run": {
                "id": run.id,
                "repository_id": r.id,
                "head_repository_id": r.id,
                "head_branch": run.head_branch,
                "head_sha": run.head_sha,
            },
        }

    def _get_run(self, p: Mapping[str, str], q: Any, b: Any) -> Result:
        r, run = self._run(p)
        return 200, self.run_json(r, run), {}

    def _request_reviewers(self, p: Mapping[str, str], q: Any, b: Mapping[str, Any]) -> Result:
        r, i = self._pull(p)
        assert i.pull is not None
        users, teams = list(b.get("reviewers") or []), list(b.get("team_reviewers") or [])
        if i.user in users:  # GitHub: 422 "Review cannot be requested from pull request author."
            raise FakeError(422, "Review cannot be requested from pull request author.")
        for who in users + [f"team:{t}" for t in teams]:
            if who not in i.pull.reviewers:
                i.pull.reviewers.append(who)
        return 201, self.pull_json(r, i), {}

    def _create_status(self, p: Mapping[str, str], q: Any, b: Mapping[str, Any]) -> Result:
        r = self._repo(p)
        body = self._rebase(self.api.example("status"), r.full_name)
        sid = next(self._ids)
        body.update(id=sid, node_id=f"SC_{sid}", state=b["state"], description=b.get("description"),
                    target_url=b.get("target_url"), context=b.get("context", "default"),
                    created_at=_now(), updated_at=_now(),
                    url=f"{self.base_url}/repos/{r.full_name}/statuses/{p['sha']}")
        body["creator"]["login"] = self.token_user
        self.statuses.append({**body, "repo": r.full_name, "sha": p["sha"]})
        return 201, body, {}

    def _cancel_run(self, p: Mapping[str, str], q: Any, b: Any) -> Result:
        r, run = self._run(p)
        if run.status == "completed":  # GitHub: 409 "Cannot cancel a workflow run that is completed."
            raise FakeError(409, "Cannot cancel a workflow run that is completed.")
        run.status, run.conclusion = "completed", "cancelled"
        for j in run.jobs:
            if j.status != "completed":
                self.set_job(j, "completed", "cancelled")
        return 202, {}, {}

    def _list_jobs(self, p: Mapping[str, str], q: Mapping[str, list[str]], b: Any) -> Result:
        r, run = self._run(p)
        # One attempt only in this fake: `latest` and `all` list the same jobs.
        items = [self.job_json(r, run, j) for j in run.jobs]
        chunk, headers = self._page(f"/repos/{r.full_name}/actions/runs/{run.id}/jobs", q, items)
        return 200, {"total_count": len(items), "jobs": chunk}, headers

    def _list_artifacts(self, p: Mapping[str, str], q: Mapping[str, list[str]], b: Any) -> Result:
        r, run = self._run(p)
        name = q.get("name", [None])[0]
        items = [
            self.artifact_json(r, run, a) for a in run.artifacts if name is None or a.name == name
        ]
        chunk, headers = self._page(
            f"/repos/{r.full_name}/actions/runs/{run.id}/artifacts", q, items
        )
        return 200, {"total_count": len(items), "artifacts": chunk}, headers

    def _artifact(self, r: RepoState, artifact_id: int) -> ArtifactState:
        for run in self.runs.values():
            if run.repo == r.full_name:
                for a in run.artifacts:
                    if a.id == artifact_id:
                        return a
        raise FakeError(404, "Not Found")

    def _sign(self, artifact_id: int, expires: int) -> str:
        msg = f"{artifact_id}:{expires}".encode()
        return hmac.new(self._blob_secret, msg, hashlib.sha256).hexdigest()

    def _download_artifact(self, p: Mapping[str, str], q: Any, b: Any) -> Result:
        r = self._repo(p)
        a = self._artifact(r, int(p["artifact_id"]))
        if p["archive_format"] != "zip":
            raise FakeError(404, "Not Found")  # GitHub serves artifacts as zip only
        if a.expired:
            raise FakeError(410, "Artifact has expired")
        # GitHub answers with a short-lived signed URL on its storage host.
        expires = int(time.time()) + 60
        location = f"{self.blob_url}/artifacts/{a.id}.zip?{urlencode({'se': expires, 'sig': self._sign(a.id, expires)})}"
        return 302, None, {"Location": location}

    def _blob_get(self, target: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
        with self._lock:
            self.blob_requests.append((target, dict(headers)))
            if "authorization" in headers:
                self.errors.append(f"GET {target} (blob storage): sent an Authorization header; the "
                                   "signed URL needs none, and the GitHub token must not leave GitHub")
                return 400, b"authorization header not allowed with a signed URL"
            split = urlsplit(target)
            m = re.fullmatch(r"/artifacts/(\d+)\.zip", split.path)
            q = parse_qs(split.query)
            try:
                aid, expires, sig = int(m.group(1)) if m else -1, int(q["se"][0]), q["sig"][0]
            except (KeyError, ValueError):
                return 403, b"signature missing"
            if not hmac.compare_digest(sig, self._sign(aid, expires)) or expires < time.time():
                return 403, b"signature mismatch or expired"
            for run in self.runs.values():
                for a in run.artifacts:
                    if a.id == aid:
                        return 200, a.data
            return 404, b"blob not found"
