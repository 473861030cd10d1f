"""Remake docs/report.png, the README's picture of `replay --report`.

Replays traces/azure_conv_sample.jsonl under continuous and vllm with a
400-block pool, writes the report to a temporary directory and has headless
Chromium take a picture of the top of the page. Needs `chromium` on PATH.

    python3 docs/make_report_png.py
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("make_report_png: no chromium on PATH", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        subprocess.run([sys.executable, "-m", "scheduler_sim", "replay",
                        "traces/azure_conv_sample.jsonl",
                        "--policy", "continuous", "--policy", "vllm", "--num-blocks", "400",
                        "--report", str(page)],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--no-first-run", f"--user-data-dir={tmp}/profile",
                        "--window-size=1000,1900", f"--screenshot={ROOT / 'docs' / 'report.png'}",
                        page.as_uri()], check=True, capture_output=True, timeout=120)
    print("wrote docs/report.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
