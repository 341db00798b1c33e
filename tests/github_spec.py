"""GitHub's own descriptions, pinned: the REST OpenAPI description and real webhook payloads.

Both come from the npm registry as tarballs (``npm pack``), never from a live GitHub:

- ``@octokit/openapi@23.0.2``: ``generated/api.github.com.json`` (OpenAPI 3.0.3, with ``$ref``s;
  the ``.deref.json`` variant is 70 MB and is not used).
- ``@octokit/webhooks-examples@7.6.1``: ``api.github.com/index.json``, a list of
  ``{"name": event, "actions": [...], "examples": [payload, ...]}``.
- ``@octokit/webhooks-schemas@7.6.1`` (same release as the examples): ``schema.json``, one
  draft-07 schema whose top level is ``oneOf`` every ``<event>_event``; each event/action pair is
  ``definitions["<event>$<action>"]`` (e.g. ``issue_comment$created``), and all of them ``$ref``
  shared pieces in the same ``definitions`` (``#/definitions/user``, ``#/definitions/issue``...).

They are cached under ``$KERNELPRO_GITHUB_SPECS`` or else ``<repo>/.cache/github-specs/`` (ignored
by git). A missing cache is filled on first use by running ``npm pack`` (a few seconds); without
npm, the tests that need the descriptions are skipped with the command to run. Fill the cache by
hand with ``python tests/github_spec.py``.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

OPENAPI_PACKAGE = "@octokit/openapi@23.0.2"
WEBHOOKS_PACKAGE = "@octokit/webhooks-examples@7.6.1"
OPENAPI_MEMBER = "package/generated/api.github.com.json"
WEBHOOKS_MEMBER = "package/api.github.com/index.json"
SCHEMAS_PACKAGE = "@octokit/webhooks-schemas@7.6.1"
SCHEMAS_MEMBER = "package/schema.json"

ROOT = Path(__file__).resolve().parents[1]


class SpecUnavailable(RuntimeError):
    """The pinned package is neither cached nor fetchable; the message says what to run."""


def cache_dir() -> Path:
    """Where the extracted packages live."""
    env = os.environ.get("KERNELPRO_GITHUB_SPECS")
    return Path(env) if env else ROOT / ".cache" / "github-specs"


def _fetch_command(package: str, dest: Path) -> list[str]:
    return ["npm", "pack", package, "--pack-destination", str(dest), "--silent"]


def _dirname(package: str) -> str:
    # "@octokit/openapi@23.0.2" -> "octokit-openapi-23.0.2" (npm's own tarball name, no .tgz)
    name, _, version = package.lstrip("@").rpartition("@")
    return f"{name.replace('/', '-')}-{version}"


def ensure(package: str, member: str) -> Path:
    """The path of ``member`` of the pinned ``package``, fetching and extracting it if needed."""
    target = cache_dir() / _dirname(package) / member
    if target.is_file():
        return target
    npm_path = shutil.which("npm")
    if npm_path is None:
        raise SpecUnavailable(
            f"{package} is not cached at {target} and npm is not installed: install npm and run "
            f"`python tests/github_spec.py` (it runs `npm pack {package}` and extracts {member}), "
            "or point KERNELPRO_GITHUB_SPECS at a filled cache"
        )
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        argv = [npm_path, *_fetch_command(package, Path(tmp))[1:]]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        tarballs = list(Path(tmp).glob("*.tgz"))
        if proc.returncode != 0 or len(tarballs) != 1:
            raise SpecUnavailable(
                f"`{' '.join(argv)}` failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}"
            )
        out = Path(tmp) / "x"
        with tarfile.open(tarballs[0]) as tar:
            tar.extract(member, out, filter="data")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(out / member, target)
    return target


def _skip_or_raise(exc: SpecUnavailable) -> Any:
    try:
        import pytest
    except ImportError:  # pragma: no cover - used outside pytest
        raise exc from None
    pytest.skip(str(exc))


@functools.lru_cache(maxsize=1)
def _openapi() -> dict[str, Any]:
    with ensure(OPENAPI_PACKAGE, OPENAPI_MEMBER).open(encoding="utf-8") as f:
        spec: dict[str, Any] = json.load(f)
    return spec


def openapi() -> dict[str, Any]:
    """GitHub's REST OpenAPI description (api.github.com), shared: do not mutate it."""
    try:
        return _openapi()
    except SpecUnavailable as exc:
        return _skip_or_raise(exc)  # type: ignore[no-any-return,unused-ignore]


@functools.lru_cache(maxsize=1)
def _webhooks() -> dict[str, list[dict[str, Any]]]:
    with ensure(WEBHOOKS_PACKAGE, WEBHOOKS_MEMBER).open(encoding="utf-8") as f:
        events = json.load(f)
    return {e["name"]: e["examples"] for e in events}


def webhook_examples(event: str, action: str | None = None) -> list[dict[str, Any]]:
    """Deep copies of the real example payloads for ``event`` (and ``action``, when given)."""
    try:
        examples = _webhooks()
    except SpecUnavailable as exc:
        return _skip_or_raise(exc)  # type: ignore[no-any-return,unused-ignore]
    if event not in examples:
        raise KeyError(f"no webhook examples for event {event!r}; known: {sorted(examples)}")
    found = [
        copy.deepcopy(p) for p in examples[event] if action is None or p.get("action") == action
    ]
    if not found:
        raise KeyError(f"no {event}.{action} example in {WEBHOOKS_PACKAGE}")
    return found


@functools.lru_cache(maxsize=1)
def _schema_bundle() -> dict[str, Any]:
    with ensure(SCHEMAS_PACKAGE, SCHEMAS_MEMBER).open(encoding="utf-8") as f:
        bundle: dict[str, Any] = json.load(f)
    return bundle


@functools.cache
def _validator(key: str) -> Any:
    from jsonschema import Draft7Validator

    bundle = _schema_bundle()
    if key not in bundle["definitions"]:
        known = sorted(k for k in bundle["definitions"] if "$" in k or k.endswith("_event"))
        raise KeyError(f"no webhook schema {key!r} in {SCHEMAS_PACKAGE}; known: {known}")
    # A root that holds the bundle's own definitions, so "#/definitions/..." refs resolve in it.
    root = {
        "$schema": bundle["$schema"],
        "definitions": bundle["definitions"],
        "allOf": [{"$ref": f"#/definitions/{key}"}],
    }
    Draft7Validator.check_schema(root)
    return Draft7Validator(root)


def _describe(error: Any) -> str:
    where = error.json_path  # "$.issue.pull_request.url"
    message = error.message
    if error.context:  # oneOf/anyOf: name the closest branch's own failure too
        from jsonschema.exceptions import best_match

        inner = best_match(error.context)
        message += f" (closest: {inner.json_path}: {inner.message})"
    return f"{where}: {message}"


def validate_webhook(event: str, action: str | None, payload: Any) -> list[str]:
    """Errors of ``payload`` against the ``event``.``action`` webhook schema; empty when valid.

    Each error names its JSON path (``$.issue.pull_request``) and what is wrong there. Without
    ``action`` the event's whole schema (``<event>_event``, a ``oneOf`` its actions) is used.
    """
    try:
        validator = _validator(f"{event}${action}" if action else f"{event}_event")
    except SpecUnavailable as exc:
        return _skip_or_raise(exc)  # type: ignore[no-any-return,unused-ignore]
    errors = sorted(validator.iter_errors(payload), key=lambda e: [str(p) for p in e.absolute_path])
    # dict.fromkeys: the same failure reached through two allOf branches is reported once
    return list(dict.fromkeys(_describe(e) for e in errors))


def valid_webhook_example(event: str, action: str) -> dict[str, Any]:
    """A deep copy of the first real ``event``.``action`` example that its own schema accepts.

    Not every example is: ``issue_comment.created`` example 0 of 7.6.1 predates fields the 7.6.1
    schema requires (``comment.reactions``, ``repository.visibility``...), see
    tests/test_webhook_schemas.py.
    """
    examples = webhook_examples(event, action)
    for payload in examples:
        if not validate_webhook(event, action, payload):
            return payload
    raise KeyError(f"none of the {len(examples)} {event}.{action} examples is schema-valid")


def write_event(path: Path, payload: Mapping[str, Any]) -> Path:
    """Write ``payload`` as GitHub Actions writes ``GITHUB_EVENT_PATH``."""
    path.write_text(json.dumps(payload), encoding="utf-8")
    return path


if __name__ == "__main__":
    for package, member in (
        (OPENAPI_PACKAGE, OPENAPI_MEMBER),
        (WEBHOOKS_PACKAGE, WEBHOOKS_MEMBER),
        (SCHEMAS_PACKAGE, SCHEMAS_MEMBER),
    ):
        print(ensure(package, member))
