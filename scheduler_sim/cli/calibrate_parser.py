"""The command line of `calibrate` (its parser only: building every command's parser
must not load the fitting code, cli/calibrate.py, which a plain `replay` never
runs)."""
from __future__ import annotations

from ..io.trace_config import ALLOW_FLAG

__all__ = ["add_calibrate_parser"]


def add_calibrate_parser(sub) -> None:
    p = sub.add_parser(
        "calibrate", help="fit the cost model to kernel profiles and real runs",
        description="Fit the cost model's coefficients to Vidur kernel profiles (--profile, "
                    "with --model and --gpu) and to real runs (--run TRACE=MEASURED), and "
                    "write a calibration file for --calibration.")
    p.add_argument("--gpu", help="the GPU the measurements are of (with --profile)")
    p.add_argument("--model", help="the model the profiles are of (with --profile)")
    p.add_argument("--profile", action="append", default=[], metavar="FILE",
                   help="a Vidur mlp.csv or attention.csv (repeatable)")
    p.add_argument("--run", action="append", default=[], metavar="TRACE=MEASURED",
                   help="a trace and its measured latencies, JSONL of {id, ttft, e2e} "
                        "(repeatable)")
    p.add_argument("--from", dest="start", default="none", metavar="CALIBRATION",
                   help="the coefficients to start from (default: none, the physics "
                        "defaults)")
    p.add_argument("--name", help="the calibration's name (default: the output's file name)")
    p.add_argument(ALLOW_FLAG, action="store_true",
                   help="run a plugin policy a --run trace's config names (Python code)")
    p.add_argument("--rounds", type=int, default=3,
                   help="replay-and-fit rounds with --run (default: 3)")
    p.add_argument("-o", "--out", required=True, metavar="OUT",
                   help="write the calibration here (- for standard output)")
