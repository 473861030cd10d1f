"""How close the simulator's times are to real vLLM: every public run replayed, and kernels.

    python3 benchmarks/accuracy.py CALIBRATION_DIR [--calibration FILE|none]
        [--runs GLOB] [--jobs N] [--json OUT] [--markdown] [--no-kernels]
    python3 benchmarks/accuracy.py - --from-json OUT [--markdown]

CALIBRATION_DIR holds `real-vllm/` (the BLIS project's 16 real vLLM 0.15.1
runs on H100 SXM: `runs/RUN.json.gz`, `runs/RUN_ground_truth.json.gz`,
`server_and_client_configs/RUN/results/config.yaml`) and `vidur/` (Vidur's
A100 Llama-3-8B kernel profiles). Nothing is read from anywhere else.

**Runs.** Each run is converted in a temporary folder with `scheduler-sim
convert --from blis-run` (its settings, prompts and timeouts; the measured
file), replayed through the Python API under `vllm` with the run's own
settings and the cost model (`--calibration` passed on as the option of that
name; without it the checkout's defaults), and compared request by request
on the requests that completed in the real run:

- TTFT and E2E: the client's `ttft_s` and `e2e_s` against the simulated
  `ttft` and `e2el` (both from the moment the request was sent);
- ITL: per request (E2E - TTFT) / (N - 1), N the tokens generated (the
  profile's output_len, exactly, with ignore_eos), on both sides; the
  simulator's `tpot` is the same quantity. inference-perf's own
  `inter_token_latency` and `time_per_output_token` are per streamed event,
  about two per token, so they are not used (docs/real-vllm-runs.md).

Per run and statistic (mean, p90, p99; a percentile is the value at rank
ceil(p/100 n) of the sorted values, as `replay` prints them) the relative
error is (predicted - actual) / actual. Over a group of runs (a split, or
"not fitted" = validate + test, or all) the MAPE is the mean of the runs'
absolute relative errors, and "max" the largest of them.

**Kernels.** For Llama-3-8B on an A100 80GB at tp 1 under the calibration
asked for (`--calibration`; by default the A100's shipped one), the cost
model's single-kernel prices (seconds over the whole model) against Vidur's
per-layer medians (ms) times the layers: `linear` (`CostModel.linear_seconds`)
against attn_pre_proj + attn_post_proj + mlp_up_proj + mlp_down_proj,
`small` (the elementwise term plus the layer floor) against the small ops
(input_layernorm, post_attention_layernorm, attn_rope, mlp_act, add),
`attention_prefill` (with its floor) against attn_prefill, and
`attention_decode` (with its floor) against the decode attention. A shape's
total is the sum of those terms on each side (`lm_head`, `allreduce`,
`step`, the KV write and Vidur's embedding are left out: the profiles do
not time them, or, for the prefill KV write, at an implausible 7 GB/s). A
cost model without single-kernel prices (before issue 23) is compared on
totals only: its dispatch time less its step overhead (the LM head
included). The A100 calibration was fitted to these same profiles, so this
is how well the model's form fits them, not a prediction. Shapes:
prefill of 128 to 8,192 tokens (no context), decode of 1 to 256 rows at
context 512 to 4,096, and mixed batches (a 128 to 2,048-token prefill with 8
to 128 decode rows at context 1,024 or 2,048: Vidur's linear time at the
sum of their tokens, interpolated between profiled counts, plus both
attentions). Reported: the median and the largest absolute relative error
per class, and per term.

Prints aligned tables; `--markdown` prints the README's tables instead (the
MAPE table, one row of errors per run, the kernels);
`--json OUT` writes every figure, and `--from-json OUT` prints the tables of
such a file again (aligned, or with `--markdown` the README's), so that both
come from one replay. The same input gives the same output.
"""
from __future__ import annotations

import argparse
import csv
import fnmatch
import glob
import gzip
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

METRICS = ("ttft", "itl", "e2e")
STATS = ("mean", "p90", "p99")
GROUPS = (("train", ("train",)), ("validate", ("validate",)), ("test", ("test",)),
          ("not fitted", ("validate", "test")), ("all", ("train", "validate", "test")))
UNITS = {"ttft": ("ms", 1e3), "itl": ("ms", 1e3), "e2e": ("s", 1.0)}
LABELS = {"ttft": "TTFT", "itl": "ITL", "e2e": "E2E"}


# --- statistics (tests/test_accuracy.py checks them on hand-computed numbers) ---------

def mean(values: list[float]) -> float:
    """The arithmetic mean (math.fsum: the same to the last bit in any order)."""
    return math.fsum(values) / len(values)


def percentile(values: list[float], p: float) -> float:
    """Nearest rank: the value at rank ceil(p/100 n) of the sorted values (rank 1 is the
    smallest), as `replay` reports percentiles."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(values: list[float]) -> dict[str, float]:
    """mean, p90 and p99 of a sample."""
    return {"mean": mean(values), "p90": percentile(values, 90), "p99": percentile(values, 99)}


def relative_error(predicted: float, actual: float) -> float:
    """(predicted - actual) / actual."""
    return (predicted - actual) / actual


def mape(errors: list[float]) -> float:
    """Mean absolute percentage error of relative errors, in percent."""
    return 100 * mean([abs(e) for e in errors])


def worst(errors: list[float]) -> float:
    """The largest absolute relative error, in percent."""
    return 100 * max(abs(e) for e in errors)


def median(values: list[float]) -> float:
    """The median (the mean of the two middle values of an even count)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def itl(ttft: float, e2e: float, tokens: int) -> float:
    """A request's mean inter-token latency: (e2e - ttft) / (tokens - 1)."""
    return (e2e - ttft) / (tokens - 1)


def compare(actual: dict[str, list[float]], predicted: dict[str, list[float]]) -> dict:
    """Per metric and statistic: the predicted and actual values and the relative error."""
    out = {}
    for metric in METRICS:
        real, sim = summary(actual[metric]), summary(predicted[metric])
        out[metric] = {s: {"predicted": sim[s], "actual": real[s],
                           "error": relative_error(sim[s], real[s])} for s in STATS}
    return out


def overall(runs: list[dict]) -> dict:
    """Per group of splits: the runs, and per metric and statistic the MAPE and the max."""
    out = {}
    for group, splits in GROUPS:
        members = [r for r in runs if r["split"] in splits]
        if not members:
            continue
        out[group] = {"runs": len(members)}
        for metric in METRICS:
            out[group][metric] = {
                s: {"mape": mape([r["metrics"][metric][s]["error"] for r in members]),
                    "max": worst([r["metrics"][metric][s]["error"] for r in members])}
                for s in STATS}
    return out


# --- one run --------------------------------------------------------------------------

def run_files(folder: str, pattern: str) -> list[tuple[str, str, str, str]]:
    """(name, run, ground truth, client config) of every run whose name matches."""
    runs = os.path.join(folder, "real-vllm", "runs")
    out = []
    for path in sorted(glob.glob(os.path.join(runs, "*.json.gz"))):
        name = os.path.basename(path)[:-len(".json.gz")]
        if name.endswith("_ground_truth") or not fnmatch.fnmatch(name, pattern):
            continue
        truth = os.path.join(runs, name + "_ground_truth.json.gz")
        config = os.path.join(folder, "real-vllm", "server_and_client_configs", name,
                              "results", "config.yaml")
        out.append((name, path, truth, config))
    return out


def replay_run(job: tuple[str, str, str, str, dict]) -> tuple[dict, float]:
    """Convert one run, replay it, and compare it with what was measured: the
    comparison, and the CPU seconds it took."""
    import io

    import scheduler_sim as sim
    from scheduler_sim.cli.main import main

    name, path, truth, config, options = job
    started = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        trace_path = os.path.join(tmp, "trace.jsonl")
        measured_path = os.path.join(tmp, "measured.jsonl")
        err = io.StringIO()
        status = main(["convert", "--from", "blis-run", path, "--client-config", config,
                       "--ground-truth", truth, "--measured", measured_path,
                       "-o", trace_path], io.StringIO(), err)
        if status:
            raise SystemExit(f"{name}: convert failed ({status}):\n{err.getvalue()}")
        trace = sim.load(trace_path)
        with open(measured_path, encoding="utf-8") as handle:
            measured = [json.loads(line) for line in handle]
        # Inside the folder: a trace above 4 MiB is read again while it replays.
        run = sim.replay(trace, **options).runs[0]
    with open(path, "rb") as handle:
        meta = json.loads(gzip.decompress(handle.read()))
    simulated = {r["id"]: r for r in run.requests}
    actual: dict[str, list[float]] = {m: [] for m in METRICS}
    predicted: dict[str, list[float]] = {m: [] for m in METRICS}
    missing = 0
    for m in measured:
        r = simulated.get(m["id"])
        if r is None or r["e2el"] is None or r["ttft"] is None:
            missing += 1  # did not complete in the simulation: left out on both sides
            continue
        n = r["output_tokens"]
        actual["ttft"].append(m["ttft"])
        actual["e2e"].append(m["e2e"])
        actual["itl"].append(itl(m["ttft"], m["e2e"], n))
        predicted["ttft"].append(r["ttft"])
        predicted["e2e"].append(r["e2el"])
        predicted["itl"].append(itl(r["ttft"], r["e2el"], n))
    summary_ = run.summary
    return {
        "run": name, "split": meta["split"], "model": trace.config.get("model"),
        "tp": trace.config.get("tp"), "requests": len(trace.workload),
        "errored": len(trace.workload) - len(measured), "compared": len(actual["ttft"]),
        "missing": missing, "preemptions": summary_.get("preemptions"),
        # prompt tokens found in the prefix cache, of all the prompt tokens admitted
        "prefix_hit": round(summary_["cached_tokens"]
                            / (summary_["cached_tokens"] + summary_["prompt_tokens"]), 4),
        "metrics": compare(actual, predicted),
    }, time.process_time() - started


# --- kernels --------------------------------------------------------------------------

LINEAR = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
SMALL_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
TERMS = ("linear", "small", "attention_prefill", "attention_decode")  # a shape's total
KERNEL_CLASSES = ("prefill", "decode", "mixed", "all")
PREFILL = (128, 256, 512, 1024, 2048, 4096, 8192)
DECODE_ROWS = (1, 8, 16, 32, 64, 128, 256)
DECODE_CONTEXTS = (512, 1024, 2048, 4096)
MIXED = [(c, b, ctx) for c in (128, 512, 1024, 2048) for b in (8, 32, 128)
         for ctx in (1024, 2048)]


def read_mlp(path: str, tp: int = 1) -> dict[int, dict[str, float]]:
    """Vidur's mlp.csv: per token count (at `tp`), the per-layer median ms of the linear
    kernels and of the small ops; a count profiled twice is their mean."""
    rows: dict[int, list[tuple[float, float]]] = {}
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if int(row["num_tensor_parallel_workers"]) != tp:
                continue
            linear = math.fsum(float(row[f"time_stats.{k}.median"]) for k in LINEAR)
            small = math.fsum(float(row[f"time_stats.{k}.median"]) for k in SMALL_OPS)
            rows.setdefault(int(row["num_tokens"]), []).append((linear, small))
    return {n: {"linear": mean([v[0] for v in vs]), "small": mean([v[1] for v in vs])}
            for n, vs in sorted(rows.items())}


def at_tokens(mlp: dict[int, dict[str, float]], tokens: int, key: str) -> float:
    """The profile's `key` at `tokens`, linear between the nearest profiled counts."""
    if tokens in mlp:
        return mlp[tokens][key]
    counts = sorted(mlp)
    above = next(n for n in counts if n > tokens)
    below = max(n for n in counts if n < tokens)
    share = (tokens - below) / (above - below)
    return mlp[below][key] + share * (mlp[above][key] - mlp[below][key])


def vidur_shape(mlp: dict, attention: dict, layers: int, chunk: int, rows: int,
                context: int) -> dict[str, float]:
    """Vidur's seconds per term of one shape: a `chunk`-token prefill without context
    and `rows` decodes at `context` each, over `layers` layers."""
    tokens = chunk + rows
    ms = {"linear": at_tokens(mlp, tokens, "linear"),
          "small": at_tokens(mlp, tokens, "small"),
          "attention_prefill": attention["prefill_kv0"][str(chunk)][1] if chunk else 0.0,
          "attention_decode": attention["decode"][str(context)][str(rows)] if rows else 0.0,
          "kv_write": attention["decode_kv_cache_save"][str(rows)] if rows and not chunk
          else None}
    return {k: None if v is None else v * layers / 1e3 for k, v in ms.items()}


def kernel_shapes(attention: dict) -> list[tuple[str, int, int, int]]:
    """(class, chunk, rows, context) of every shape compared."""
    shapes = [("prefill", c, 0, 0) for c in PREFILL]
    shapes += [("decode", 0, b, ctx) for ctx in DECODE_CONTEXTS for b in DECODE_ROWS
               if str(b) in attention["decode"][str(ctx)]]
    shapes += [("mixed", c, b, ctx) for c, b, ctx in MIXED]
    return shapes


class TotalOnly:
    """A cost model without `breakdown` (the one before issue 23): its dispatch time less
    its step overhead stands for the kernels' total, as one term, `dispatch`."""

    def __init__(self, cost) -> None:
        self.cost = cost
        self.model = cost.model

    def breakdown(self, chunks, rows, contexts) -> dict[str, float]:
        return {"dispatch": self.cost.dispatch_seconds(chunks, rows, contexts)
                - self.cost.step_overhead}


class Kernels:
    """The cost model's kernels, per Vidur term (its single-kernel prices: the linear
    layers, the small ops as the elementwise term plus the layer floor, each attention
    with its floor)."""

    def __init__(self, cost) -> None:
        self.cost = cost
        self.model = cost.model

    def breakdown(self, chunks, rows, contexts) -> dict[str, float]:
        cost = self.cost
        tokens = rows + sum(c for c, _ in chunks)
        return {"linear": cost.linear_seconds(tokens),
                "small": cost.elementwise_seconds(tokens) + cost.layer_floor_seconds(),
                "attention_prefill": math.fsum(cost.prefill_attention_seconds(c, x)
                                               for c, x in chunks),
                "attention_decode": cost.decode_attention_seconds(rows, contexts) if rows
                else 0.0}


def kernel_model(calibration: str | None):
    """The checkout's cost model for Llama-3-8B on an A100 80GB, tp 1, under
    `calibration` (None: the GPU's default), as `Kernels` (or TotalOnly when the
    checkout's cost model has no single-kernel prices)."""
    from scheduler_sim.gpu import costmodel
    try:
        from scheduler_sim.gpu.catalogue import parse_cost_model
    except ImportError:  # a checkout from before the catalogue had a module of its own
        parse_cost_model = costmodel.parse_cost_model

    model, gpu = parse_cost_model("llama-3-8b/a100-80gb")
    if not hasattr(costmodel.CostModel, "linear_seconds"):
        return TotalOnly(costmodel.CostModel(model, gpu))
    from scheduler_sim.gpu.calibration import is_file_spec, resolve_calibration
    from scheduler_sim.io.specs import read_calibration_file
    chosen = (read_calibration_file(calibration) if is_file_spec(calibration)
              else resolve_calibration(calibration, gpu.name))
    return Kernels(costmodel.CostModel(model, gpu, chosen.coefficients, 1))


def kernels(folder: str, calibration: str | None) -> dict:
    """The kernel comparison (see the module's docstring) of the checkout's cost model."""
    vidur = os.path.join(folder, "vidur")
    model = kernel_model(calibration)
    mlp = read_mlp(os.path.join(vidur, "a100_llama3_8b_mlp.csv"))
    with open(os.path.join(vidur, "vidur_a100_llama3_8b_attention_extract.json"),
              encoding="utf-8") as handle:
        attention = json.load(handle)
    return compare_kernels(mlp, attention, model)


def compare_kernels(mlp: dict, attention: dict, model) -> dict:
    """Every shape of `kernel_shapes` priced by `model.breakdown` against Vidur's terms:
    per shape, per class (median and largest absolute error of the totals) and per
    term."""
    layers = model.model.layers
    shapes = []
    for kind, chunk, rows, context in kernel_shapes(attention):
        measured = vidur_shape(mlp, attention, layers, chunk, rows, context)
        chunks = [(chunk, 0)] if chunk else []
        terms = model.breakdown(chunks, rows, rows * context)
        total_m = math.fsum(measured[t] for t in TERMS)
        total_p = terms["dispatch"] if "dispatch" in terms else math.fsum(
            terms.get(t, 0.0) for t in TERMS)
        shapes.append({"class": kind, "chunk": chunk, "rows": rows, "context": context,
                       "measured": measured, "predicted": dict(terms),
                       "total_measured": total_m, "total_predicted": total_p,
                       "error": relative_error(total_p, total_m)})
    classes = {}
    for kind in KERNEL_CLASSES:
        errors = [s["error"] for s in shapes if kind in ("all", s["class"])]
        worst_shape = max((s for s in shapes if kind in ("all", s["class"])),
                          key=lambda s: abs(s["error"]))
        classes[kind] = {"shapes": len(errors), "median": 100 * median([abs(e) for e in errors]),
                         "max": worst(errors), "worst": shape_name(worst_shape)}
    per_term = {}
    for term in TERMS + ("kv_write",):
        errors = [relative_error(s["predicted"].get(term, 0.0), s["measured"][term])
                  for s in shapes if s["measured"][term]]
        if errors and any(term in s["predicted"] for s in shapes):
            per_term[term] = {"shapes": len(errors), "median": 100 * median([abs(e) for e in errors]),
                              "max": worst(errors)}
    return {"model": "llama-3-8b", "gpu": "a100-80gb", "tp": 1,
            "breakdown": not isinstance(model, TotalOnly), "classes": classes,
            "terms": per_term, "shapes": shapes}


def shape_name(shape: dict) -> str:
    """`prefill 8192`, `decode 256 x 2048`, `mixed 2048 + 128 x 1024`."""
    if shape["class"] == "prefill":
        return f"prefill {shape['chunk']}"
    decode = f"{shape['rows']} x {shape['context']}"
    return f"decode {decode}" if shape["class"] == "decode" else \
        f"mixed {shape['chunk']} + {decode}"


# --- tables ---------------------------------------------------------------------------

def _pct(value: float) -> str:
    return f"{100 * value:+.1f}%"


def number(value: float) -> str:
    """Four significant digits, thousands separated: 0.02798, 27.98, 1,066."""
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    digits = 3 - (math.floor(math.log10(magnitude)) if magnitude else 0)
    return f"{value:.{max(0, digits)}f}"


def short(run: str) -> str:
    """A run's name without its timestamp: `llama-2-7b-tp1-codegen`."""
    parts = run.split("-")
    return "-".join(parts[2:]) if len(parts) > 2 and parts[0].isdigit() else run


def run_table(runs: list[dict], metric: str) -> list[list[str]]:
    """Rows of one metric's per-run table: predicted, actual and error per statistic."""
    unit, scale = UNITS[metric]
    head = ["run", "split", "compared"]
    for s in STATS:
        head += [f"{s} pred {unit}", f"{s} real {unit}", f"{s} err"]
    rows = [head]
    for r in runs:
        row = [short(r["run"]), r["split"], f"{r['compared']:,}"]
        for s in STATS:
            cell = r["metrics"][metric][s]
            row += [number(cell["predicted"] * scale), number(cell["actual"] * scale),
                    _pct(cell["error"])]
        rows.append(row)
    return rows


def overall_table(groups: dict) -> list[list[str]]:
    """Rows of the MAPE table: per group, MAPE (max) of each metric and statistic."""
    head = ["runs", "n"] + [f"{LABELS[m]} {s}" for m in METRICS for s in STATS]
    rows = [head]
    for group, _ in GROUPS:  # in this order, also when read back from JSON
        if group not in groups:
            continue
        figures = groups[group]
        row = [group, str(figures["runs"])]
        for m in METRICS:
            for s in STATS:
                cell = figures[m][s]
                row.append(f"{cell['mape']:.1f}% ({cell['max']:.0f}%)")
        rows.append(row)
    return rows


def kernel_table(result: dict) -> list[list[str]]:
    rows = [["shapes", "n", "median abs. error", "max abs. error", "worst"]]
    for kind in KERNEL_CLASSES:
        c = result["classes"][kind]
        rows.append([kind, str(c["shapes"]), f"{c['median']:.1f}%", f"{c['max']:.1f}%",
                     c["worst"]])
    for term in TERMS + ("kv_write",):
        if term not in result["terms"]:
            continue
        c = result["terms"][term]
        rows.append([f"term {term}", str(c["shapes"]), f"{c['median']:.1f}%",
                     f"{c['max']:.1f}%", ""])
    return rows


def aligned(rows: list[list[str]]) -> str:
    """Columns padded to their widest cell: the first left-aligned, the rest right."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                     for r in rows) + "\n"


def markdown(rows: list[list[str]]) -> str:
    """A Markdown table: columns of text left-aligned, of numbers right-aligned."""
    head = "| " + " | ".join(rows[0]) + " |\n"
    text = [i == 0 or any(r[i][:1].isalpha() for r in rows[1:]) for i in range(len(rows[0]))]
    rule = "|" + "|".join("---" if t else "---:" for t in text) + "|\n"
    return head + rule + "".join("| " + " | ".join(r) + " |\n" for r in rows[1:])


def summary_run_table(runs: list[dict]) -> list[list[str]]:
    """One row per run: its model and tp, and the error of each metric's mean and of
    the E2E p99 (the README's per-run table)."""
    rows = [["run", "split", "tp", "TTFT mean", "ITL mean", "E2E mean", "E2E p99"]]
    for r in runs:
        m = r["metrics"]
        rows.append([short(r["run"]), r["split"], str(r["tp"]), _pct(m["ttft"]["mean"]["error"]),
                     _pct(m["itl"]["mean"]["error"]), _pct(m["e2e"]["mean"]["error"]),
                     _pct(m["e2e"]["p99"]["error"])])
    return rows


def report(result: dict, as_markdown: bool) -> str:
    """The printed report: aligned, every table; or in Markdown the README's: the MAPE
    table, the errors per run, the kernels."""
    fmt = markdown if as_markdown else aligned
    runs = result["runs"]
    parts = []
    if runs:
        parts.append(f"Real vLLM runs ({result['setting']}): MAPE over runs of the per-run "
                     "relative error (largest in brackets)\n\n" + fmt(overall_table(result["groups"])))
        if as_markdown:
            parts.append("Relative error per run\n\n" + fmt(summary_run_table(runs)))
        else:
            for metric in METRICS:
                parts.append(f"{LABELS[metric]} per run\n\n" + fmt(run_table(runs, metric)))
    k = result.get("kernels")
    if k is not None:
        what = ("the model's linear, small-op (elementwise and layer floor) and attention terms" if k["breakdown"] else
                "no breakdown in this checkout: its dispatch time less the step overhead")
        parts.append(f"Kernels: {k['model']} on {k['gpu']}, tp {k['tp']}, against Vidur's "
                     f"A100 Llama-3-8B profiles (totals: {what})\n\n" + fmt(kernel_table(k)))
    return "\n".join(parts)


def describe_setting(calibration: str | None) -> str:
    """What priced the runs, as the report's first line says it."""
    from scheduler_sim.records.option_table import OPTIONS
    if "calibration" not in OPTIONS:
        return "the cost model's defaults; this checkout has no calibrations"
    return f"calibration {calibration}" if calibration else "the default calibration"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", metavar="CALIBRATION_DIR",
                        help="the folder holding real-vllm/ and vidur/")
    parser.add_argument("--calibration", metavar="FILE|none",
                        help="passed to the replays as the `calibration` option (default: "
                             "the checkout's default for the GPU)")
    parser.add_argument("--runs", default="*", metavar="GLOB",
                        help="only the runs whose name matches (default: all)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="replay N runs at once (default: 1)")
    parser.add_argument("--json", metavar="OUT", help="write every figure as JSON here")
    parser.add_argument("--markdown", action="store_true",
                        help="print the README's tables (Markdown) instead of aligned ones")
    parser.add_argument("--no-kernels", action="store_true", help="skip the kernel section")
    parser.add_argument("--from-json", metavar="FILE",
                        help="print the tables of an earlier --json output instead of "
                             "replaying (CALIBRATION_DIR is then not read)")
    args = parser.parse_args(argv)
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as handle:
            sys.stdout.write(report(json.load(handle), args.markdown))
        return 0
    options = {}
    if args.calibration is not None:
        from scheduler_sim.records.option_table import OPTIONS
        if "calibration" not in OPTIONS:
            parser.error("--calibration: this checkout has no `calibration` option")
        options["calibration"] = args.calibration
    files = run_files(args.folder, args.runs)
    if not files and args.runs != "*":
        parser.error(f"--runs {args.runs}: no run matches")
    started = time.perf_counter()
    jobs = [(name, path, truth, config, options) for name, path, truth, config in files]
    if args.jobs > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(min(args.jobs, len(jobs))) as pool:
            done = list(pool.map(replay_run, jobs))
    else:
        done = [replay_run(job) for job in jobs]
    runs = [run for run, _ in done]
    for run, cpu in done:
        print(f"{run['run']}: {cpu:.1f} s of CPU", file=sys.stderr)
    setting = describe_setting(args.calibration)
    result = {"setting": setting, "runs": runs, "groups": overall(runs) if runs else {}}
    if not args.no_kernels:
        result["kernels"] = kernels(args.folder, args.calibration)
    wall = time.perf_counter() - started
    sys.stdout.write(report(result, args.markdown))
    print(f"{len(runs)} runs replayed in {wall:.0f} s of wall time (--jobs {args.jobs})",
          file=sys.stderr)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1, sort_keys=True)
            handle.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
