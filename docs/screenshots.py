"""Render every comment state and the follow-up PR body as GitHub shows them, to PNG.

    npm install --prefix /tmp/gfm marked@12 github-markdown-css@5 mermaid@10
    apt-get install -y chromium
    python docs/screenshots.py --node-modules /tmp/gfm/node_modules [--out docs/screenshots]

The Markdown comes from the bot's own renderers (the same templates the workflow uses) fed with the
recorded H200 results (tests/fixtures/results_h200) and a CPU variant of them; `marked` renders it
as GitHub Flavored Markdown into a page styled by `github-markdown-css`, `mermaid` draws the charts
(as github.com does), and headless Chromium takes the screenshot. Tests check the same texts through
the local GitHub (tests/test_bot_body.py, tests/test_commands.py, tests/test_action.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

_PAGE = """<!doctype html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="{css}">
<style>body{{background:#fff;margin:0}} .markdown-body{{box-sizing:border-box;max-width:880px;padding:24px;
border:1px solid #d0d7de;border-radius:6px;margin:12px}} .hdr{{font:600 14px -apple-system,sans-serif;
padding:8px 12px;background:#f6f8fa;border-bottom:1px solid #d0d7de;margin:-24px -24px 16px}}</style>
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


def states() -> dict[str, tuple[str, str]]:
    """name -> (title, Markdown) for every state the bot writes."""
    from test_bot_artifact import ALLOWED, H200

    from kernelpro.bot.artifact import load_results
    from kernelpro.bot.body import (
        code_block,
        render_body,
        render_no_pr_comment,
        render_summary_comment,
    )
    from kernelpro.bot.command import reply_text
    from kernelpro.bot.comment import progress_body
    from kernelpro.bot.progress import KernelProgress, Snapshot, render
    from kernelpro.bot.publish import _fork_comment

    gpu = load_results(H200, allowed_files=ALLOWED)
    t = gpu.targets[0]
    cpu = dataclasses.replace(gpu, targets=(dataclasses.replace(t, gpu_timings=False, hardware="cpu (Triton interpreter)"),))
    lost = dataclasses.replace(gpu, targets=(dataclasses.replace(t, winner=None, patch="", patch_files=()),))
    run = "https://github.com/acme/kernels/actions/runs/4242"
    pr = "https://github.com/acme/kernels/pull/43"
    head, base = "9710f2e74a158b49fdabc5bd531cfa8ae1f51fc1", "e6a69d3c015e8410525dfad2765a6aef981ec77d"
    snap = Snapshot((KernelProgress("swiglu", "done", 16, 3.55, "", run + "/job/1"),
                     KernelProgress("rmsnorm", "running", None, None, "", run + "/job/2")), False, ())
    return {
        "1-queued": ("kernelpro commented (queued)",
                     progress_body("queued", kernel_i=0, kernels=2, evaluations=0, best_speedup=None)
                     + "\nWill be optimized: swiglu, rmsnorm.\n"),
        "2-running": ("kernelpro commented (running)", render(snap, run_id=4242, run_url=run)),
        "3-done-gpu": ("kernelpro commented (done, H200)",
                       render_summary_comment(gpu, pr_number=42, head_sha=head, base_sha=base, pr_url=pr, run_url=run)),
        "4-done-cpu": ("kernelpro commented (done, no GPU)",
                       render_summary_comment(cpu, pr_number=42, head_sha=head, base_sha=base, pr_url=pr, run_url=run)),
        "5-baseline-stands": ("kernelpro commented (no follow-up PR)",
                              render_no_pr_comment(lost, run_url=run, pr_number=42, head_sha=head, base_sha=base)),
        "6-fork": ("kernelpro commented (fork)", _fork_comment(gpu, gpu.patch, 42, head_sha=head, run_url=run)),
        "7-failed": ("kernelpro commented (failed)",
                     progress_body("failed", kernel_i=1, kernels=2, evaluations=9, best_speedup=None,
                                   reason="publishing failed: GitHub answered 502. Rerun the publish job: the "
                                          "results are kept in the workflow's artifacts")),
        "8-help": ("kernelpro replied to /kernelpro help", reply_text("help", repo="acme/kernels")),
        "9-bad-kernel": ("kernelpro replied to /kernelpro retry --kernel nosuch",
                         reply_text("invalid", error=code_block("--kernel nosuch: no kernel of that name is configured "
                                                                "in the base branch's .kernelpro.yml"),
                                    fix="Name a kernel configured in the base branch's `.kernelpro.yml`: `swiglu`, `rmsnorm`.")),
        "10-follow-up-pr": ("kernelpro: 3.55x faster swiglu for #42",
                            render_body(gpu, pr_number=42, head_sha=head, run_url=run, kernelpro_version="0.1.0",
                                        programmer="tuner", model=None, base_sha=base)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--node-modules", required=True, help="folder holding marked, github-markdown-css, mermaid")
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser") or "chromium")
    ap.add_argument("--only", help="render only states whose name contains this")
    a = ap.parse_args(argv)
    nm, out = Path(a.node_modules).resolve(), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kp-shots-") as tmp:
        js = Path(tmp) / "marked.js"
        js.write_text(_MARKED)
        for name, (title, text) in states().items():
            if a.only and a.only not in name:
                continue
            (out / f"{name}.md").write_text(text)
            html = subprocess.run(["node", str(js), str(nm / "marked")], input=text, capture_output=True,
                                  text=True, check=True).stdout
            page = Path(tmp) / f"{name}.html"
            page.write_text(_PAGE.format(css=(nm / "github-markdown-css" / "github-markdown-light.css").as_uri(),
                                         mermaid=(nm / "mermaid" / "dist" / "mermaid.min.js").as_uri(),
                                         title=json.dumps(title)[1:-1], html=html))
            height = 160 + 24 * text.count("\n") + 500 * text.count("```mermaid")
            png = out / f"{name}.png"
            subprocess.run([a.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            f"--window-size=920,{min(height, 4000)}", "--virtual-time-budget=8000",
                            f"--screenshot={png}", page.as_uri()], check=True, capture_output=True, timeout=120)
            print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
