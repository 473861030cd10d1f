"""`scheduler-sim calibrate`: fit the cost model's coefficients and write a calibration.

Two kinds of measurement, either or both:

- `--profile FILE` (repeatable): Vidur kernel profiles (mlp.csv,
  attention.csv) of `--model` on `--gpu`; fits the kernel coefficients
  (gpu/calibration.py `fit_kernels`).
- `--run TRACE=MEASURED` (repeatable): a trace whose config names the model,
  GPU and scheduler settings, and the latencies a real server measured for
  its requests; fits the serving coefficients by replaying
  (io/run_fit.py), after the profiles if both are given.

It starts from `--from CALIBRATION` (a file, a shipped GPU's name, or
`none`, the default: the physics defaults), writes the calibration to
`-o FILE` (`-` for standard output), and prints the coefficients, how each
was set, and the residuals as a table (on standard error when the
calibration goes to standard output).
"""
from __future__ import annotations

import argparse
import os
from typing import TextIO

from ..gpu.calibration import (Calibration, dump, fit_kernels, is_file_spec,
                               resolve_calibration, residual_summary, sha256_of)
from ..gpu.coefficients import FIELDS
from ..gpu.catalogue import cost_specs, gpu_named, model_named
from ..gpu.profiles import read_profile
from ..gpu.kv_pool import fit_pool
from ..io.inputs import read_limited
from ..io.output_paths import check_output_paths
from ..io.outputs import write_whole
from ..io.run_fit import MeasuredRun, fit_runs, read_measured
from ..io.specs import read_calibration_file, spec_inputs
from ..io.trace import read_trace
from ..io.trace_config import allow_trace_plugins, resolve_options
from ..records.errors import UsageError

__all__ = ["cmd_calibrate"]

MAX_INPUT_BYTES = 256 * 2 ** 20


def _read(path: str) -> str:
    """A profile's or a measured file's text (at most 256 MiB)."""
    data = read_limited(path, MAX_INPUT_BYTES, "which no profile or measured file is")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: invalid UTF-8 at byte {exc.start + 1}") from None


def _runs(specs: list[str], allowed: bool = False) -> list[MeasuredRun]:
    runs = []
    for spec in specs:
        trace_path, sep, measured_path = spec.partition("=")
        if not sep or not trace_path or not measured_path:
            raise UsageError(f"--run must look like TRACE=MEASURED, got {spec!r}")
        trace = read_trace(trace_path)
        options = allow_trace_plugins(trace, resolve_options(trace.config, {}, trace.directory)[0],
                                      allowed)
        if len(options.policy) != 1 or options.fleet:
            raise UsageError(f"{trace_path}: a measured run is one engine under one policy "
                             f"(its config names {list(options.policy)}"
                             f"{' on a fleet' if options.fleet else ''})")
        measured = read_measured(measured_path, _read(measured_path))
        outputs = {spec_.id: spec_.output_tokens for spec_ in trace.workload.arrivals()}
        options = fit_pool(options)[0]
        runs.append(MeasuredRun(os.path.basename(trace_path), trace.workload, options,
                                options.policy[0], measured, outputs))
    return runs


def cmd_calibrate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Fit, write the calibration, print the table."""
    inputs = [("a profile", p) for p in args.profile]
    if is_file_spec(args.start):
        inputs.append(("the calibration of --from", args.start))
    for spec in args.run:
        trace_path, _, measured_path = spec.partition("=")
        inputs += [("a run's trace", trace_path), ("a run's measurements", measured_path)]
    check_output_paths([("-o", args.out)], inputs)
    if not args.profile and not args.run:
        raise UsageError("calibrate needs measurements: --profile FILE (with --model and "
                         "--gpu) or --run TRACE=MEASURED")
    if not 1 <= args.rounds <= 10:
        raise UsageError(f"--rounds must be from 1 to 10, got {args.rounds}")
    gpu_name = args.gpu
    start = (read_calibration_file(args.start) if is_file_spec(args.start)
             else resolve_calibration(args.start, gpu_name or "any"))
    k = start.coefficients
    fitted = {name: f"from {start.name}" for name in FIELDS}
    data: list[dict] = []
    residuals: dict = {}
    points: list = []
    if args.profile:
        if not args.model or not args.gpu:
            raise UsageError("--profile needs --model and --gpu (the profiles' model and GPU)")
        model, gpu = model_named(args.model), gpu_named(args.gpu)
        kernel_points = []
        for path in args.profile:
            text = _read(path)
            found = read_profile(path, text, model)
            kernel_points += found
            data.append({"file": os.path.basename(path),
                         "sha256": sha256_of(text.encode("utf-8")),
                         "points": len(found), "model": model.name, "gpu": gpu.name})
        before = k
        k, rows = fit_kernels(model, gpu, kernel_points, k)
        for name in FIELDS:
            if getattr(k, name) != getattr(before, name):
                fitted[name] = f"kernel profiles of {model.name} on {gpu.name}"
        residuals.update(residual_summary(rows))
        points = [[kind, tokens, context, tp, round(measured, 9), round(predicted, 9)]
                  for kind, tokens, context, tp, measured, predicted in rows]
    if args.run:
        runs = _runs(args.run, args.allow_trace_plugins)
        # The runs' traces may name a model, GPU or calibration file: inputs too.
        check_output_paths([("-o", args.out)], inputs + [
            (what, path) for run in runs for what, path in spec_inputs(run.options)])
        gpus = {cost_specs(run.options)[1].name for run in runs}
        if gpu_name is None:
            if len(gpus) > 1:
                raise UsageError(f"the runs are on several GPUs ({', '.join(sorted(gpus))}): "
                                 f"calibrate one GPU at a time")
            gpu_name = gpus.pop()
        before = k
        k, rows = fit_runs(runs, k, rounds=args.rounds,
                           progress=lambda text: err.write(f"calibrate: {text}\n"))
        for name in FIELDS:
            if getattr(k, name) != getattr(before, name):
                fitted[name] = "real runs"
        for run, row in zip(runs, rows):
            data.append({"run": run.name, "requests": len(run.measured)})
        residuals["runs"] = [{"run": r["run"], **{f"{key}_error": round(
            r["predicted"][key] / r["measured"][key] - 1, 4) for key in r["measured"]}}
            for r in rows]
    name = args.name or (os.path.splitext(os.path.basename(args.out))[0]
                         if args.out != "-" else gpu_name)
    calibration = Calibration(name, gpu_name, k, fitted, data, residuals, points)
    text = dump(calibration)
    table = _table(calibration)
    write_whole(args.out, text, out)
    (err if args.out == "-" else out).write(table)
    return 0


def _table(calibration: Calibration) -> str:
    rows = [("coefficient", "value", "set by")]
    for name in FIELDS:
        rows.append((name, f"{getattr(calibration.coefficients, name):.6g}",
                     calibration.fitted.get(name, "default")))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    lines = [f"calibration {calibration.name} for {calibration.gpu}", ""]
    lines += [f"{a.ljust(w0)}  {b.rjust(w1)}  {c}" for a, b, c in rows]
    kernel = {kind: v for kind, v in calibration.residuals.items() if kind != "runs"}
    if kernel:
        lines += ["", "kernel residuals |predicted / measured - 1|:"]
        for kind, v in kernel.items():
            lines.append(f"  {kind:<8} {v['points']:>5} points  median {v['median']:.1%}  "
                         f"max {v['max']:.1%}")
    for run in calibration.residuals.get("runs", []):
        errors = "  ".join(f"{key[:-6]} {value:+.1%}" for key, value in run.items()
                           if key.endswith("_error"))
        lines.append(f"  {run['run']}: {errors}")
    return "\n".join(lines) + "\n"
