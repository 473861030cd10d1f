"""Calibration files: fitted cost-model coefficients, what they were fitted on, and how well.

A calibration is a JSON object:

    {"scheduler_sim_calibration": 1,
     "name": "h100-sxm", "gpu": "h100-sxm",
     "coefficients": {"gemm_efficiency": 0.74, ...},      every coefficient
     "fitted": {"gemm_efficiency": "kernel profile ...", ...},  how each was set
     "data": [{"file": ..., "sha256": ..., "points": ..., "source": ..., "license": ...}],
     "residuals": {"linear": {"points": 456, "median": 0.02, "max": 0.2}, ...},
     "points": [["linear", tokens, context, tp, measured s, predicted s], ...]}

Only `scheduler_sim_calibration`, `gpu` and `coefficients` are required;
a coefficient left out keeps its default (coefficients.py). The package
ships one calibration per GPU it has data for (`SHIPPED`, in
data/calibrations/); with a cost model, the GPU's shipped calibration is
used unless `calibration` names another file or `none` (the physics
defaults).

`fit_kernels` fits the GPU-kernel coefficients to Vidur profile points
(profiles.py): one bounded Nelder-Mead (fit.py) over the mean squared log
error of each kind of point (linear, prefill, decode) and of the whole
dispatches the points compose (an attention point plus the linear point of
the same token count), the four groups weighed alike.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from importlib import resources

from ..records.errors import ConfigError, UsageError
from ..records.frozen import Frozen, record
from . import coefficients as coeffs
from .coefficients import DEFAULTS, Coefficients
from .fit import log_error, minimize

__all__ = ["Calibration", "SHIPPED", "NONE", "parse_calibration", "is_file_spec",
           "shipped_for", "resolve_calibration", "fit_kernels", "KERNEL_COEFFICIENTS",
           "residual_summary", "dump", "sha256_of"]

FORMAT_KEY = "scheduler_sim_calibration"
MAX_BYTES = 16 * 2 ** 20


@record  # a frozen dataclass, its methods written once (records/frozen.py)
class Calibration(Frozen):
    """A set of coefficients, where they came from, and the residuals of the fit."""

    name: str
    gpu: str
    coefficients: Coefficients
    fitted: dict = dataclasses.field(default_factory=dict, compare=False)
    data: list = dataclasses.field(default_factory=list, compare=False)
    residuals: dict = dataclasses.field(default_factory=dict, compare=False)
    points: list = dataclasses.field(default_factory=list, compare=False)
    path: str | None = dataclasses.field(default=None, compare=False)

    def as_json(self) -> dict:
        """The file's object (see the module docstring)."""
        out = {FORMAT_KEY: 1, "name": self.name, "gpu": self.gpu,
               "coefficients": self.coefficients.as_dict(), "fitted": self.fitted,
               "data": self.data, "residuals": self.residuals}
        if self.points:
            out["points"] = self.points
        return out


# The physics defaults, as a calibration (`--calibration none`).
NONE = Calibration("none", "any", DEFAULTS, {name: "default" for name in coeffs.FIELDS})

# GPU name -> the file of its shipped calibration.
SHIPPED: dict[str, str] = {
    "h100-sxm": "h100-sxm.json",
    "a100-80gb": "a100-80gb.json",
}


def dump(calibration: Calibration) -> str:
    """The file's text: sorted-free, two-space JSON, one point per line (stable bytes)."""
    obj = calibration.as_json()
    points = obj.pop("points", None)
    text = json.dumps(obj, indent=2)
    if points:
        rows = ",\n    ".join(json.dumps(p) for p in points)
        text = text[:-2] + f',\n  "points": [\n    {rows}\n  ]\n}}'
    return text + "\n"


def sha256_of(data: bytes) -> str:
    import hashlib  # (here: OpenSSL's library loaded only when asked; kv/block_keys.py)
    return hashlib.sha256(data).hexdigest()


def parse_calibration(text: str, where: str) -> Calibration:
    """A calibration from its file's `text`. UsageError when it is too large or not a
    JSON object; ConfigError listing every problem of its fields (one a line, as a
    model's config.json: a UsageError's text is printed on one line)."""
    if len(text) > MAX_BYTES:
        raise UsageError(f"{where}: a calibration file is at most {MAX_BYTES // 2**20} MiB, "
                         f"got {len(text):,} characters")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{where}: not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: a calibration is a JSON object, got {type(obj).__name__}")
    problems = []
    if obj.get(FORMAT_KEY) != 1 or isinstance(obj.get(FORMAT_KEY), bool):
        problems.append(f"field {FORMAT_KEY!r}: must be 1, got {_show(obj.get(FORMAT_KEY))}")
    gpu = obj.get("gpu")
    if not isinstance(gpu, str) or not gpu:
        problems.append(f"field 'gpu': must be a GPU name, got {_show(gpu)}")
    name = obj.get("name", os.path.splitext(os.path.basename(where))[0])
    if not isinstance(name, str) or not name:
        problems.append(f"field 'name': must be a non-empty string, got {_show(name)}")
    values = obj.get("coefficients")
    chosen: dict[str, float] = {}
    if not isinstance(values, dict):
        problems.append(f"field 'coefficients': must be an object, got {_show(values)}")
    else:
        for key, value in values.items():
            if key not in coeffs.FIELDS:
                problems.append(f"field 'coefficients.{key}': unknown coefficient (known: "
                                f"{', '.join(coeffs.FIELDS)})")
                continue
            problem = coeffs.problem(key, value)
            if problem:
                problems.append(f"field 'coefficients.{key}': {problem}")
            else:
                chosen[key] = float(value)
    for key in ("fitted", "residuals"):
        if key in obj and not isinstance(obj[key], dict):
            problems.append(f"field {key!r}: must be an object, got {_show(obj[key])}")
    for key in ("data", "points"):
        if key in obj and not isinstance(obj[key], list):
            problems.append(f"field {key!r}: must be a list, got {_show(obj[key])}")
    if problems:
        raise ConfigError([f"{where}: {p}" for p in problems])
    return Calibration(name, gpu, DEFAULTS.replace(**chosen), obj.get("fitted", {}),
                       obj.get("data", []), obj.get("residuals", {}), obj.get("points", []),
                       where)


def _show(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def shipped_for(gpu_name: str) -> Calibration | None:
    """The calibration the package ships for `gpu_name`, if any."""
    file = SHIPPED.get(gpu_name)
    if file is None:
        return None
    text = resources.files(__package__).joinpath("data", "calibrations", file).read_text(
        encoding="utf-8")
    return dataclasses.replace(parse_calibration(text, f"shipped:{file}"),
                               path=f"shipped:{file}")


def is_file_spec(spec: str | None) -> bool:
    """Whether the `calibration` option names a file (not None, none or a shipped name)."""
    return spec is not None and spec != "none" and spec not in SHIPPED


def resolve_calibration(spec: str | None, gpu_name: str,
                        loaded: Calibration | None = None) -> Calibration:
    """What `calibration` (the option) means for a GPU: None -> the GPU's shipped
    calibration, or the physics defaults when there is none; `none` -> the defaults;
    a shipped name -> that one; a file -> `loaded`, which io/specs.py read (a
    UsageError when it did not)."""
    if spec is None:
        return shipped_for(gpu_name) or NONE
    if spec == "none":
        return NONE
    if spec in SHIPPED:
        return shipped_for(spec)
    if loaded is None:
        raise UsageError(f"calibration {spec!r} is a file: read it with "
                         "scheduler_sim.io.specs.load_specs before the run")
    return loaded


# --- fitting the kernel coefficients to profiles ------------------------------------

# What a kernel profile can tell (the rest are serving overheads, fitted on real runs).
KERNEL_COEFFICIENTS: tuple[str, ...] = (
    "gemm_efficiency", "gemm_bandwidth_efficiency", "gemm_sharpness", "gemm_half_tokens",
    "gemm_tile_tokens", "elementwise_efficiency", "layer_floor", "attention_efficiency", "attention_half_tokens",
    "prefill_attention_floor", "kv_read_efficiency", "decode_attention_floor")

# The tile sizes tried for gemm_tile_tokens (rows of a GEMM tile; 1: none).
TILES = (1, 16, 32, 64, 128, 256)

# The search box of each: fractions of HBM bandwidth at most 0.95 (no kernel streams
# memory faster; a fit that wants more is making up for another term).
_BOX: dict[str, tuple[float, float]] = {
    "gemm_efficiency": (0.05, 1.0), "gemm_bandwidth_efficiency": (0.05, 0.95),
    "gemm_sharpness": (1.0, 16.0), "gemm_half_tokens": (0.0, 2048.0),
    "elementwise_efficiency": (0.02, 0.95), "layer_floor": (0.0, 200e-6),
    "attention_efficiency": (0.02, 1.0), "attention_half_tokens": (0.0, 8192.0),
    "prefill_attention_floor": (0.0, 200e-6), "kv_read_efficiency": (0.05, 0.95),
    "decode_attention_floor": (0.0, 200e-6),
}


def fit_kernels(model, gpu, points: Sequence, start: Coefficients = DEFAULTS,
                names: Sequence[str] = KERNEL_COEFFICIENTS
                ) -> tuple[Coefficients, list[tuple]]:
    """Fit `names` to the kernel `points` (profiles.KernelPoint) of `model` on `gpu`:
    the coefficients, and per point (kind, tokens, context, tp, measured, predicted).
    Kinds with no point leave their coefficients alone."""
    from .costmodel import CostModel
    from .profiles import predict
    kinds = {p.kind for p in points}
    wanted = [n for n in names if _relevant(n, kinds)]
    by_kind: dict[str, list] = {}
    for point in points:
        by_kind.setdefault(point.kind, []).append(point)
    tps = sorted({p.tp for p in points})

    # Whole dispatches as Vidur composes them: the linear point of the same token count
    # and tp plus the attention point (a prefill of C tokens, a decode of R rows).
    linear_at = {(p.tokens, p.tp): p for p in by_kind.get("linear", ())}
    dispatches = [(linear_at[p.tokens, p.tp], p) for p in points
                  if p.kind != "linear" and (p.tokens, p.tp) in linear_at]

    def loss(k: Coefficients) -> float:
        models = {tp: CostModel(model, gpu, k, tp) for tp in tps}
        total = 0.0
        for group in by_kind.values():
            total += sum(log_error(predict(models[p.tp], p), p.seconds) for p in group) / len(group)
        if dispatches:
            total += sum(log_error(predict(models[a.tp], a) + predict(models[b.tp], b),
                                   a.seconds + b.seconds) for a, b in dispatches) / len(dispatches)
        return total

    # Tiles are whole: with gemm_tile_tokens wanted, one fit of the rest from each tile
    # size, the best kept.
    bases = [start]
    if "gemm_tile_tokens" in wanted:
        wanted.remove("gemm_tile_tokens")
        bases = [start.replace(gemm_tile_tokens=float(tile)) for tile in TILES]
    fitted, best = start, None
    if wanted:
        for base in bases:
            fit = minimize(lambda x: loss(base.replace(**dict(zip(wanted, x)))),
                           [getattr(base, n) for n in wanted], [_BOX[n] for n in wanted])
            if best is None or fit.loss < best:
                best, fitted = fit.loss, base.replace(**dict(zip(wanted, fit.point)))
    models = {tp: CostModel(model, gpu, fitted, tp) for tp in tps}
    rows = [(p.kind, p.tokens, p.context, p.tp, p.seconds, predict(models[p.tp], p))
            for p in points]
    return fitted, rows


def _relevant(name: str, kinds: set) -> bool:
    if name in ("attention_efficiency", "attention_half_tokens", "prefill_attention_floor"):
        return "prefill" in kinds
    if name in ("kv_read_efficiency", "decode_attention_floor"):
        return "decode" in kinds
    return "linear" in kinds


def residual_summary(rows: Sequence[tuple]) -> dict[str, dict]:
    """By kind: the number of points and the median and max of |predicted / measured - 1|."""
    out: dict[str, dict] = {}
    for kind in ("linear", "prefill", "decode"):
        errors = sorted(abs(r[5] / r[4] - 1) for r in rows if r[0] == kind)
        if errors:
            out[kind] = {"points": len(errors), "median": round(_median(errors), 4),
                         "max": round(errors[-1], 4)}
    return out


def _median(values: list[float]) -> float:
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
