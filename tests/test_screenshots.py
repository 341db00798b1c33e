"""docs/screenshots/ is what the bot writes now: each .md there is the text docs/screenshots.py's
states() gives from the bot's own renderers, so the screenshots cannot drift from the code
(regenerate them with the command in docs/screenshots.py's docstring). The PNG is rendered only
where Chromium, node and the GFM modules are (KERNELPRO_GFM_MODULES, default /tmp/gfm/node_modules)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import struct
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "docs" / "screenshots"
REGENERATE = "python docs/screenshots.py --node-modules /tmp/gfm/node_modules (docs/screenshots.py says how to install them)"
PNG = b"\x89PNG\r\n\x1a\n"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kernelpro_docs_screenshots", ROOT / "docs" / "screenshots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()
STATES = SCRIPT.states()


def test_the_states_cover_every_comment_and_reply() -> None:
    for name in ("queued", "running", "done-gpu", "done-cpu", "baseline-stands", "fork", "failed", "help",
                 "bad-kernel", "follow-up-pr", "nothing-to-do", "model-written", "status", "cancel",
                 "cancel-refused"):
        assert any(n.split("-", 1)[1] == name for n in STATES), name


def test_no_screenshot_of_a_state_that_is_gone() -> None:
    names = {p.stem for p in SHOTS.iterdir() if p.suffix in (".md", ".png")}
    assert names <= set(STATES), f"stale: {sorted(names - set(STATES))}; regenerate: {REGENERATE}"


@pytest.mark.parametrize("name", sorted(STATES))
def test_the_markdown_is_what_the_bot_writes_now(name: str) -> None:
    path = SHOTS / f"{name}.md"
    assert path.exists(), f"{path.name} is missing; regenerate: {REGENERATE}"
    assert path.read_text() == STATES[name][1], f"{path.name} differs from the bot's text; regenerate: {REGENERATE}"


@pytest.mark.parametrize("name", sorted(STATES))
def test_every_state_has_its_png(name: str) -> None:
    path = SHOTS / f"{name}.png"
    assert path.exists(), f"{path.name} is missing; regenerate: {REGENERATE}"
    data = path.read_bytes()
    assert data[:8] == PNG and struct.unpack(">I", data[16:20])[0] == 920, path.name  # --window-size=920,...


def test_the_cpu_state_shows_nothing_a_cpu_run_does_not_measure() -> None:
    text = STATES["4-done-cpu"][1]
    assert "> [!WARNING]" in text and "n/a (no GPU)" in text and " % |" not in text  # no roofline floor


# --------------------------------------------------------------------------- GitHub alerts

WARNING = "<blockquote>\n<p>[!WARNING]\n<strong>Not GPU timings.</strong> Read on.</p>\n</blockquote>\n"


def test_an_alert_becomes_githubs_markup() -> None:
    html = SCRIPT.github_alerts("<p>before</p>\n" + WARNING + "<p>after</p>\n")
    assert "[!WARNING]" not in html and "<blockquote>" not in html
    assert '<div class="markdown-alert markdown-alert-warning">' in html
    assert '<p class="markdown-alert-title"><svg class="octicon octicon-alert mr-2"' in html
    assert "</svg>Warning</p>\n<p><strong>Not GPU timings.</strong> Read on.</p>\n</div>" in html
    assert html.startswith("<p>before</p>\n") and html.endswith("</div>\n<p>after</p>\n")


def test_an_alert_with_its_text_in_a_second_paragraph_and_a_plain_quote() -> None:
    note = "<blockquote>\n<p>[!note]</p>\n<p>text</p>\n<blockquote>\n<p>inner</p>\n</blockquote>\n</blockquote>\n"
    plain = "<blockquote>\n<p>a quote that mentions [!NOTE]</p>\n</blockquote>\n"
    html = SCRIPT.github_alerts(note + plain)
    assert html.count('class="markdown-alert markdown-alert-note"') == 1 and "</svg>Note</p>\n<p>text</p>" in html
    assert "<blockquote>\n<p>inner</p>\n</blockquote>\n</div>" in html  # the nested quote stays inside
    assert html.endswith(plain)


# --------------------------------------------------------------------------- the real renderers

MODULES = Path(os.environ.get("KERNELPRO_GFM_MODULES", "/tmp/gfm/node_modules"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_marked = pytest.mark.skipif(not shutil.which("node") or not (MODULES / "marked").is_dir(),
                                  reason=f"node or marked missing ({MODULES})")


@needs_marked
def test_marked_output_gets_the_alert(tmp_path: Path) -> None:
    js = tmp_path / "marked.js"
    js.write_text(SCRIPT._MARKED)
    out = subprocess.run(["node", str(js), str(MODULES / "marked")], input=STATES["4-done-cpu"][1],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    html = SCRIPT.github_alerts(out)
    assert "[!WARNING]" in out and "[!WARNING]" not in html
    assert '<div class="markdown-alert markdown-alert-warning">' in html and "These timings are not GPU timings" in html


@pytest.mark.slow
@needs_marked
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium")
def test_the_script_renders_a_png(tmp_path: Path) -> None:
    assert SCRIPT.main(["--node-modules", str(MODULES), "--out", str(tmp_path), "--only", "13-status",
                        "--chromium", str(CHROMIUM)]) == 0
    assert (tmp_path / "13-status.md").read_text() == STATES["13-status"][1]
    data = (tmp_path / "13-status.png").read_bytes()
    assert data[:8] == PNG and struct.unpack(">I", data[16:20])[0] == 920
