"""Remake docs/report.png, the README's picture of `replay --report`.

Replays the full Azure conversation trace (converted as benchmarks/README.md
says: `scheduler-sim convert --from azure AzureLLMInferenceTrace_conv.csv -o
azure.jsonl`) under vllm, sglang and continuous with the flags of the public-
trace runs, writes the report to a temporary directory and has headless
Chromium take a picture of the top of the page, 1400 pixels wide. Needs
`chromium` on PATH; takes about a minute and a half of CPU.

    python3 docs/make_report_png.py AZURE.jsonl
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ["--policy", "vllm", "--policy", "sglang", "--policy", "continuous",
         "--cost-model", "llama-3-8b/h100-sxm", "--block-size", "16", "--num-blocks", "20480",
         "--token-budget", "8192", "--max-rows", "256"]
WINDOW = "1400,2500"  # width, height in CSS pixels


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("make_report_png: no chromium on PATH", file=sys.stderr)
        return 1
    trace = Path(argv[0]).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        subprocess.run([sys.executable, "-m", "scheduler_sim", "replay", str(trace), *FLAGS,
                        "--quiet", "--report", str(page)],
                       check=True, cwd=tmp, stdout=subprocess.DEVNULL,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--no-first-run", f"--user-data-dir={tmp}/profile",
                        f"--window-size={WINDOW}", f"--screenshot={ROOT / 'docs' / 'report.png'}",
                        page.as_uri()], check=True, capture_output=True, timeout=120)
    print("wrote docs/report.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
