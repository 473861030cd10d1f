"""Run a lab's commands and print the transcript its expected.txt records.

Usage: python labs/transcript.py labs/01-trace-replay [--write]

Each lab folder has a `commands` file, one `scheduler-sim ...` command per
line (run from inside the lab folder). The transcript is each command after
`$ `, then what it printed (stdout, then stderr), then its exit status when
it is not 0. With --write the transcript replaces the lab's expected.txt;
tests/test_labs.py regenerates it and compares byte for byte.
"""
from __future__ import annotations

import contextlib
import io
import os
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler_sim.cli.main import main  # noqa: E402


def transcript(lab: Path) -> str:
    """The transcript of every command of `lab`, run in-process from the lab folder."""
    lines = [line.strip() for line in (lab / "commands").read_text().splitlines()]
    parts = []
    here = os.getcwd()
    os.chdir(lab)
    try:
        for command in lines:
            if not command or command.startswith("#"):
                continue
            argv = shlex.split(command)
            if argv[0] != "scheduler-sim":
                raise SystemExit(f"{lab}/commands: every command starts with scheduler-sim")
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out):
                status = main(argv[1:], out=out, err=err)
            parts.append(f"$ {command}\n{out.getvalue()}{err.getvalue()}")
            if status:
                parts.append(f"(exit status {status})\n")
            parts.append("\n")
    finally:
        os.chdir(here)
    return "".join(parts)


if __name__ == "__main__":
    lab = Path(sys.argv[1])
    text = transcript(lab)
    if "--write" in sys.argv[2:]:
        (lab / "expected.txt").write_text(text)
    else:
        sys.stdout.write(text)
