"""Packaging a maintainer can pin: one version, written once; project URLs that name the same
repository as the example workflow's `uses:` lines (README, "Versions")."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

import kernelpro

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the suite runs on 3.11 (.ci/run)

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Semantic versioning 2.0.0 (semver.org's own regular expression, without build metadata, which a
# wheel's version cannot carry): releases are tagged `v` + this.
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?$")
KERNELPRO_USES = re.compile(r"uses: ([^/@\s`]+/kernelpro)@")


def test_the_version_is_written_once() -> None:
    project = PYPROJECT["project"]
    assert "version" not in project, "pyproject.toml must not repeat the version: kernelpro.__version__ is the one"
    assert "version" in project.get("dynamic", [])
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kernelpro.__version__"}


def test_the_version_is_semantic() -> None:
    assert SEMVER.match(kernelpro.__version__), kernelpro.__version__


def test_installed_metadata_has_the_version() -> None:
    """The metadata pip wrote (here: the editable install, `pip install -e .`) carries
    kernelpro.__version__; after a version bump, reinstall (`pip install --no-deps -e .`)."""
    try:
        dist = importlib.metadata.distribution("kernelpro")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("kernelpro is not installed: `pip install --no-deps -e .`")
    assert dist.version == kernelpro.__version__, (
        f"installed metadata says {dist.version}, kernelpro.__version__ is {kernelpro.__version__}: "
        "reinstall with `pip install --no-deps -e .`")


def test_project_urls_name_the_repository_the_workflow_uses() -> None:
    """kernelpro has no public home yet, so its repository is the placeholder `OWNER/kernelpro`
    everywhere; whatever it becomes, the URLs and the `uses:` lines must name the same one."""
    example = (ROOT / "examples" / "workflows" / "kernelpro.yml").read_text()
    docs = (ROOT / "docs" / "github.md").read_text() + (ROOT / "README.md").read_text()
    used = set(KERNELPRO_USES.findall(example))
    assert len(used) == 1, used
    (repo,) = used
    assert set(KERNELPRO_USES.findall(docs)) == {repo}
    urls = PYPROJECT["project"]["urls"]
    assert urls
    for name, url in urls.items():
        assert re.fullmatch(rf"https://github\.com/{re.escape(repo)}(/.*)?", url), (name, url, repo)
