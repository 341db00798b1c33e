"""Progress bars only on a terminal: in a log, a line per new best and none of tqdm's redraws."""

from __future__ import annotations

import io
import sys
from types import SimpleNamespace

import pytest

from kernelpro.pipeline import _progress
from kernelpro.settings import Settings


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(monkeypatch: pytest.MonkeyPatch, stream: io.StringIO, **env: str) -> str:
    monkeypatch.setattr(sys, "stderr", stream)
    for k in ("NO_COLOR", "CI"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    settings = Settings.from_env({"KERNELPRO_PROGRESS": "1", **env})
    update = _progress(settings, 4, "swiglu")
    for i, best in enumerate((1.0, 1.0, 2.5, 2.5), 1):
        update(i, 4, SimpleNamespace(outcome=SimpleNamespace(status="PASSED"), speedup=best), best)
    update.close()  # type: ignore[attr-defined]
    return stream.getvalue()


def test_no_bar_in_a_log(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _run(monkeypatch, io.StringIO())
    assert "\r" not in out and "eval/s" not in out and "it/s" not in out
    assert out.splitlines() == ["[swiglu] evaluation 1/4: new best in the search 1.00x (PASSED)",
                                "[swiglu] evaluation 3/4: new best in the search 2.50x (PASSED)"]


def test_a_bar_on_a_terminal_unless_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "\r" in _run(monkeypatch, _Tty())
    out = _run(monkeypatch, _Tty(), NO_COLOR="1")
    assert "\r" not in out and "new best in the search 2.50x" in out


def test_no_bar_in_ci_even_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """CI=true (GitHub Actions sets it; its log viewer may report a terminal): lines, not a bar."""
    out = _run(monkeypatch, _Tty(), CI="true")
    assert "\r" not in out and out.splitlines()[-1] == "[swiglu] evaluation 3/4: new best in the search 2.50x (PASSED)"
