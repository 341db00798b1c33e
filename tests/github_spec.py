"""GitHub's own descriptions, pinned: the REST OpenAPI description and real webhook payloads.

Both come from the npm registry as tarballs (``npm pack``), never from a live GitHub:

- ``@octokit/openapi@23.0.2``: ``generated/api.github.com.json`` (OpenAPI 3.0.3, with ``$ref``s;
  the ``.deref.json`` variant is 70 MB and is not used).
- ``@octokit/webhooks-examples@7.6.1``: ``api.github.com/index.json``, a list of
  ``{"name": event, "actions": [...], "examples": [payload, ...]}``.

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


def write_event(path: Path, payload: Mapping[str, Any]) -> Path:
    """Write ``payload`` as GitHub Actions writes ``GITHUB_EVENT_PATH``."""
    path.write_text(json.dumps(payload), encoding="utf-8")
    return path


if __name__ == "__main__":
    for package, member in ((OPENAPI_PACKAGE, OPENAPI_MEMBER), (WEBHOOKS_PACKAGE, WEBHOOKS_MEMBER)):
        print(ensure(package, member))
