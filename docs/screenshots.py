"""Render every comment state and the follow-up PR body as GitHub shows them, to PNG.

    npm install --prefix /tmp/gfm marked@12 github-markdown-css@5 mermaid@10
    apt-get install -y chromium
    python docs/screenshots.py --node-modules /tmp/gfm/node_modules [--out docs/screenshots]

The Markdown comes from the bot's own renderers (the same templates and functions the workflow
uses) fed with the recorded H200 results (tests/fixtures/results_h200) and a CPU variant of them;
`marked` renders it as GitHub Flavored Markdown, GitHub's alerts (`> [!WARNING]`) are turned into
the markup github.com gives them, `github-markdown-css` styles the page, `mermaid` draws the charts
(as github.com does), and headless Chromium takes the screenshot. Run without --only, it also
removes screenshots of states that no longer exist. tests/test_screenshots.py checks that the
committed .md files are what `states()` gives now; tests/test_bot_body.py, tests/test_commands.py
and tests/test_action.py check the same texts through the local GitHub."""

from __future__ import annotations

import argparse
import dataclasses
import html as html_lib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

_PAGE = """<!doctype html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="{css}">
<style>body{{background:#fff;margin:0}} .markdown-body{{box-sizing:border-box;max-width:880px;padding:24px;
border:1px solid #d0d7de;border-radius:6px;margin:12px}} .hdr{{font:600 14px -apple-system,sans-serif;
padding:8px 12px;background:#f6f8fa;border-bottom:1px solid #d0d7de;margin:-24px -24px 16px}}
.markdown-body .mr-2{{margin-right:8px}}</style>
</head><body><article class="markdown-body"><div class="hdr">{title}</div>{html}</article>
<script src="{mermaid}"></script>
<script>
for (const c of document.querySelectorAll('pre code.language-mermaid')) {{
  const d = document.createElement('div'); d.className = 'mermaid'; d.textContent = c.textContent;
  c.parentElement.replaceWith(d);
}}
document.querySelectorAll('details').forEach(d => d.open = true);  // show what a reader can expand
mermaid.initialize({{startOnLoad: false}}); mermaid.run();
</script></body></html>"""

_MARKED = """const {marked} = require(process.argv[2]);
const fs = require('fs');
marked.use({gfm: true, breaks: false});
process.stdout.write(marked.parse(fs.readFileSync(0, 'utf8')));"""

# GitHub's alerts, as github.com renders `> [!KIND]`: the kind's title with its octicon (paths from
# @primer/octicons 19: info, light-bulb, report, alert, stop), styled by github-markdown-css's
# .markdown-alert rules. `marked` knows no alerts and leaves the marker as text.
_OCTICONS = {
    "note": ("info", "M0 8a8 8 0 1 1 16 0A8 8 0 0 1 0 8Zm8-6.5a6.5 6.5 0 1 0 0 13 6.5 6.5 0 0 0 0-13ZM6.5 7.75A.75.75 0 0 1 7.25 7h1a.75.75 0 0 1 .75.75v2.75h.25a.75.75 0 0 1 0 1.5h-2a.75.75 0 0 1 0-1.5h.25v-2h-.25a.75.75 0 0 1-.75-.75ZM8 6a1 1 0 1 1 0-2 1 1 0 0 1 0 2Z"),
    "tip": ("light-bulb", "M8 1.5c-2.363 0-4 1.69-4 3.75 0 .984.424 1.625.984 2.304l.214.253c.223.264.47.556.673.848.284.411.537.896.621 1.49a.75.75 0 0 1-1.484.211c-.04-.282-.163-.547-.37-.847a8.456 8.456 0 0 0-.542-.68c-.084-.1-.173-.205-.268-.32C3.201 7.75 2.5 6.766 2.5 5.25 2.5 2.31 4.863 0 8 0s5.5 2.31 5.5 5.25c0 1.516-.701 2.5-1.328 3.259-.095.115-.184.22-.268.319-.207.245-.383.453-.541.681-.208.3-.33.565-.37.847a.751.751 0 0 1-1.485-.212c.084-.593.337-1.078.621-1.489.203-.292.45-.584.673-.848.075-.088.147-.173.213-.253.561-.679.985-1.32.985-2.304 0-2.06-1.637-3.75-4-3.75ZM5.75 12h4.5a.75.75 0 0 1 0 1.5h-4.5a.75.75 0 0 1 0-1.5ZM6 15.25a.75.75 0 0 1 .75-.75h2.5a.75.75 0 0 1 0 1.5h-2.5a.75.75 0 0 1-.75-.75Z"),
    "important": ("report", "M0 1.75C0 .784.784 0 1.75 0h12.5C15.216 0 16 .784 16 1.75v9.5A1.75 1.75 0 0 1 14.25 13H8.06l-2.573 2.573A1.458 1.458 0 0 1 3 14.543V13H1.75A1.75 1.75 0 0 1 0 11.25Zm1.75-.25a.25.25 0 0 0-.25.25v9.5c0 .138.112.25.25.25h2a.75.75 0 0 1 .75.75v2.19l2.72-2.72a.749.749 0 0 1 .53-.22h6.5a.25.25 0 0 0 .25-.25v-9.5a.25.25 0 0 0-.25-.25Zm7 2.25v2.5a.75.75 0 0 1-1.5 0v-2.5a.75.75 0 0 1 1.5 0ZM9 9a1 1 0 1 1-2 0 1 1 0 0 1 2 0Z"),
    "warning": ("alert", "M6.457 1.047c.659-1.234 2.427-1.234 3.086 0l6.082 11.378A1.75 1.75 0 0 1 14.082 15H1.918a1.75 1.75 0 0 1-1.543-2.575Zm1.763.707a.25.25 0 0 0-.44 0L1.698 13.132a.25.25 0 0 0 .22.368h12.164a.25.25 0 0 0 .22-.368Zm.53 3.996v2.5a.75.75 0 0 1-1.5 0v-2.5a.75.75 0 0 1 1.5 0ZM9 11a1 1 0 1 1-2 0 1 1 0 0 1 2 0Z"),
    "caution": ("stop", "M4.47.22A.749.749 0 0 1 5 0h6c.199 0 .389.079.53.22l4.25 4.25c.141.14.22.331.22.53v6a.749.749 0 0 1-.22.53l-4.25 4.25A.749.749 0 0 1 11 16H5a.749.749 0 0 1-.53-.22L.22 11.53A.749.749 0 0 1 0 11V5c0-.199.079-.389.22-.53Zm.84 1.28L1.5 5.31v5.38l3.81 3.81h5.38l3.81-3.81V5.31L10.69 1.5ZM8 4a.75.75 0 0 1 .75.75v3.5a.75.75 0 0 1-1.5 0v-3.5A.75.75 0 0 1 8 4Zm0 8a1 1 0 1 1 0-2 1 1 0 0 1 0 2Z"),
}
# A blockquote whose first line is only the marker: then a line break in the same paragraph (more
# text follows in it) or the paragraph's end.
_ALERT = re.compile(r"<blockquote>\s*<p>\[!(NOTE|TIP|IMPORTANT|WARNING|CAUTION)\][ \t]*(\n|<br>\s*|</p>\s*)", re.I)
_QUOTE_TAG = re.compile(r"<blockquote>|</blockquote>")


def github_alerts(html: str) -> str:
    """``marked``'s HTML with every GitHub alert blockquote (``> [!NOTE]``, ``> [!WARNING]``, ...)
    replaced by the ``markdown-alert`` markup github.com renders; other blockquotes stay."""
    out, pos = [], 0
    while (m := _ALERT.search(html, pos)) is not None:
        depth, end = 1, m.end()
        for tag in _QUOTE_TAG.finditer(html, m.end()):
            depth += 1 if tag.group(0) == "<blockquote>" else -1
            if depth == 0:
                end = tag.start()
                break
        else:
            break  # an unclosed blockquote: leave the rest as it is
        kind = m.group(1).lower()
        icon, path = _OCTICONS[kind]
        svg = (f'<svg class="octicon octicon-{icon} mr-2" viewBox="0 0 16 16" version="1.1" width="16" '
               f'height="16" aria-hidden="true"><path d="{path}"></path></svg>')
        inner = github_alerts(html[m.end():end])
        opened = "" if m.group(2).startswith("</p>") else "<p>"  # the marker's paragraph goes on
        out += [html[pos:m.start()], f'<div class="markdown-alert markdown-alert-{kind}">',
                f'<p class="markdown-alert-title">{svg}{kind.capitalize()}</p>\n', opened, inner, "</div>"]
        pos = end + len("</blockquote>")
    return "".join(out) + html[pos:]


class _GitHub:
    """Where the bot's functions that post (``command.reply``, ``job.say_done``) put their text:
    one stand-in for the repository, the issue and the sticky comment, so the screenshots show
    exactly what they post. ``reply`` asks to cancel a run through the Actions API: GitHub's 202."""

    url = "https://api.github.com/repos/acme/kernels"

    def __init__(self) -> None:
        self.text = ""
        self._requester = self

    def get_issue(self, number: int) -> _GitHub:
        return self

    def create_comment(self, text: str) -> None:
        self.text = text

    def update(self, body: str, *, force: bool = False) -> bool:
        self.text = body
        return True

    def requestJson(self, verb: str, url: str) -> tuple[int, dict[str, Any], None]:  # noqa: N802 (PyGithub's name)
        return 202, {}, None


def states() -> dict[str, tuple[str, str]]:
    """name -> (title, Markdown) for every state the bot writes."""
    from github import GithubException
    from test_bot_artifact import ALLOWED, H200

    from kernelpro.bot.artifact import load_results
    from kernelpro.bot.body import render_body, render_no_pr_comment, render_summary_comment
    from kernelpro.bot.change import Kernel, config_snippet
    from kernelpro.bot.command import reply
    from kernelpro.bot.comment import progress_body
    from kernelpro.bot.event import Trigger
    from kernelpro.bot.followup import CANCELLED_WHY, NO_RESULTS_WHY, stopped_body
    from kernelpro.bot.job import explain, say_done
    from kernelpro.bot.plan import NO_CONFIG
    from kernelpro.bot.progress import KernelProgress, Snapshot, live_marker, render
    from kernelpro.bot.publish import _fork_comment, title_for
    from kernelpro.schema import ProgrammerUse

    gpu = load_results(H200, allowed_files=ALLOWED)
    t = gpu.targets[0]
    # What a run without a GPU writes (runner/report.py, runner/harness.py _environment): device cpu,
    # the interpreter as its hardware, no CUDA or driver, no Stage 1 (roofline) and no profile or
    # findings (both GPU only, runner/optimize.py). The timings stay the recorded H200 ones.
    cpu = dataclasses.replace(gpu, targets=(dataclasses.replace(
        t, device="cpu", hardware="cpu_triton_interpreter", gpu_timings=False, stage1=None, findings=(),
        winner_findings=None, profile_seconds=0.0,
        libs=tuple((k, v) for k, v in t.libs if k in ("python", "torch", "triton"))),))
    lost = dataclasses.replace(gpu, targets=(dataclasses.replace(t, winner=None, patch="", patch_files=()),))
    # A model's candidates, counted as the recorded LLM demo counted them
    # (benchmarks/results-h200-session12/tier-par/llm-demo-report.md).
    llm = dataclasses.replace(gpu, targets=(dataclasses.replace(
        t, programmer=ProgrammerUse("llm", "demo-model", "127.0.0.1:35325", 7, 13966, 437, 0, 0)),))
    repo, pr_number = "acme/kernels", 42
    run = f"https://github.com/{repo}/actions/runs/4242"
    pr = f"https://github.com/{repo}/pull/43"
    head, base = "9710f2e74a158b49fdabc5bd531cfa8ae1f51fc1", "e6a69d3c015e8410525dfad2765a6aef981ec77d"
    snap = Snapshot((KernelProgress("swiglu", "done", 16, 3.55, "", run + "/job/1"),
                     KernelProgress("rmsnorm", "running", None, None, "", run + "/job/2")), False, ())
    running = render(snap, run_id=4242, run_url=run)

    def posted(kind: str, *, sender: str = "octocat", may_write: bool = True, sticky: str | None = running,
               error: str = "") -> str:
        """What ``command.reply`` posts for ``/kernelpro <kind>`` while ``sticky`` is the sticky comment."""
        gh = _GitHub()
        trigger = Trigger(kind, repo, pr_number, None, None, None, sender, comment_id=7, error=error)
        reply(gh, trigger, sticky_body=sticky, may_write=may_write, label="optimize-kernels",
              known_kernels=["swiglu", "rmsnorm"])
        return gh.text

    def nothing_to_do() -> str:
        """What plan's say_done writes when the base branch has no .kernelpro.yml (bot/plan.py)."""
        gh = _GitHub()
        say_done(gh, NO_CONFIG, [Kernel("kernels/swiglu.py", "swiglu_kernel", "triton", 12)], config_snippet,
                 markdown=True)
        return gh.text

    # What publish writes when GitHub fails it (bot/followup.py): explain()'s sentence and the rerun hint.
    failed = explain(GithubException(502, {"message": "Server Error"}), "publishing")
    return {
        "1-queued": ("kernelpro commented (queued)",
                     progress_body("queued", kernel_i=0, kernels=2, evaluations=0, best_speedup=None)
                     + "\nWill be optimized: swiglu, rmsnorm.\n" + live_marker(4242) + "\n"),
        "2-running": ("kernelpro commented (running)", running),
        "3-done-gpu": ("kernelpro commented (done, H200)",
                       render_summary_comment(gpu, pr_number=pr_number, head_sha=head, base_sha=base, pr_url=pr,
                                              run_url=run)),
        "4-done-cpu": ("kernelpro commented (done, no GPU)",
                       render_summary_comment(cpu, pr_number=pr_number, head_sha=head, base_sha=base, pr_url=pr,
                                              run_url=run)),
        "5-baseline-stands": ("kernelpro commented (no follow-up PR)",
                              render_no_pr_comment(lost, run_url=run, pr_number=pr_number, head_sha=head,
                                                   base_sha=base)),
        "6-fork": ("kernelpro commented (fork)", _fork_comment(gpu, gpu.patch, pr_number, head_sha=head, run_url=run)),
        "7-failed": ("kernelpro commented (publishing failed)",
                     progress_body("failed", kernel_i=0, kernels=len(gpu.targets), evaluations=0, best_speedup=None,
                                   reason=f"{failed}. Rerun the publish job: the results are kept in the "
                                          "workflow's artifacts")),
        "8-help": ("kernelpro replied to /kernelpro help", posted("help")),
        "9-bad-kernel": ("kernelpro replied to /kernelpro retry --kernel nosuch",
                         posted("invalid", error="--kernel nosuch: no kernel of that name is configured in the "
                                                 "base branch's .kernelpro.yml")),
        "10-follow-up-pr": (title_for(gpu, pr_number),
                            render_body(gpu, pr_number=pr_number, head_sha=head, run_url=run, kernelpro_version="0.1.0",
                                        programmer="tuner", model=None, base_sha=base)),
        "11-nothing-to-do": ("kernelpro commented (done, nothing configured)", nothing_to_do()),
        "12-model-written": ("kernelpro commented (done, a model wrote the patch)",
                             render_summary_comment(llm, pr_number=pr_number, head_sha=head, base_sha=base,
                                                    pr_url=pr, run_url=run, model_written=("swiglu",))),
        "13-status": ("kernelpro replied to /kernelpro status", posted("status")),
        "14-cancel": ("kernelpro replied to /kernelpro cancel", posted("cancel", sender="maintainer")),
        "15-cancel-refused": ("kernelpro replied to /kernelpro cancel (no write access)",
                              posted("cancel", sender="visitor", may_write=False)),
        "16-no-results": ("kernelpro commented (every optimize job failed)",
                          stopped_body(NO_RESULTS_WHY, 2, run)),
        "17-run-cancelled": ("kernelpro commented (run cancelled from the Actions tab)",
                             stopped_body(CANCELLED_WHY, 2, run)),
    }


_SHOT = re.compile(r"^\d+-[a-z0-9-]+\.(md|png)$")
"""The names this script writes; only these are removed as stale."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--node-modules", required=True, help="folder holding marked, github-markdown-css, mermaid")
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser") or "chromium")
    ap.add_argument("--only", help="render only states whose name contains this")
    a = ap.parse_args(argv)
    nm, out = Path(a.node_modules).resolve(), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    shots = states()
    if not a.only:
        for old in sorted(out.iterdir()):
            if _SHOT.fullmatch(old.name) and old.name.rsplit(".", 1)[0] not in shots:
                old.unlink()
                print(f"removed {old} (no such state now)")
    with tempfile.TemporaryDirectory(prefix="kp-shots-") as tmp:
        js = Path(tmp) / "marked.js"
        js.write_text(_MARKED)
        for name, (title, text) in shots.items():
            if a.only and a.only not in name:
                continue
            (out / f"{name}.md").write_text(text)
            html = github_alerts(subprocess.run(["node", str(js), str(nm / "marked")], input=text,
                                                capture_output=True, text=True, check=True).stdout)
            page = Path(tmp) / f"{name}.html"
            page.write_text(_PAGE.format(css=(nm / "github-markdown-css" / "github-markdown-light.css").as_uri(),
                                         mermaid=(nm / "mermaid" / "dist" / "mermaid.min.js").as_uri(),
                                         title=html_lib.escape(title), html=html))
            # The page is as tall as its text (about 100 characters a line at this width), rather
            # too tall than cut; a mermaid chart adds its own height.
            height = 160 + 26 * sum(1 + len(line) // 100 for line in text.splitlines()) + 500 * text.count("```mermaid")
            png = out / f"{name}.png"
            subprocess.run([a.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            f"--window-size=920,{min(height, 4000)}", "--virtual-time-budget=8000",
                            f"--screenshot={png}", page.as_uri()], check=True, capture_output=True, timeout=120)
            print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
