"""Does a change keep every output byte for byte? A manifest of output digests, and a diff.

    python3 benchmarks/identical.py TRACES_DIR -o MANIFEST.json [--checkout DIR]
        [--jobs N] [--quick] [--work-dir DIR]
    python3 benchmarks/identical.py TRACES_DIR --against MANIFEST.json [...]

A refactoring of the engine must change no result. This runs a fixed set of
replays with one checkout (this one, or `--checkout DIR`, for example a
`git worktree` of the commit before the work) and records, per run, the
SHA-256 of everything it wrote: standard output (the JSON summary, with
`--requests` the per-request records), the per-request CSV and the event
stream. `--against` runs the same set and lists every run whose outputs
differ from the manifest's, with exit status 1 (0 when all agree).

The set (TRACES_DIR holds `azure_llm_2023/AzureLLMInferenceTrace_conv.csv` and
`mooncake/conversation_trace.jsonl`, converted with the checkout's own
`convert`; see benchmarks/README.md for where to download them):

- the Azure and Mooncake conversation traces under all six built-in
  policies, with and without prefix caching, with events and per-request
  CSV (Llama-3-8B on an H100 SXM, 20,480 blocks of 16 tokens, 8,192 tokens
  and 256 requests per dispatch, as in targets.py);
- Mooncake with prefix caching under `vllm` on fleets: 4 replicas under each
  router, 2 data-parallel lockstep ranks, and 1 prefill + 2 decode replicas;
- every trace shipped in `traces/` under every policy, with `--requests`
  and events (named by their path inside the checkout, `traces/NAME`, so
  that the summaries are the same from any checkout);
- without events (which turn the decode cohort off, so the runs above never
  count decoders): the public traces and every shipped trace under
  `serial` and `continuous`, the policies that count them, with the
  summary and the per-request CSV.

`--quick` keeps the first 2,000 lines of each converted public trace: its
config line and 1,999 requests (about a tenth of the time; the benchmarks'
"first 2,000 requests" are these). Event streams are hashed as they are written and then
deleted (the Azure ones are about 330 MB each).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ("serial", "continuous", "vllm", "sglang", "static", "dynamic")
COUNTING = ("serial", "continuous")  # the policies whose steady decoders a replay counts
COMMON = ["--cost-model", "llama-3-8b/h100-sxm", "--block-size", "16", "--num-blocks", "20480",
          "--token-budget", "8192", "--max-rows", "256", "--quiet"]
FLEETS = {
    "4 replicas, round-robin": ["--replicas", "4", "--router", "round-robin"],
    "4 replicas, least-loaded": ["--replicas", "4", "--router", "least-loaded"],
    "4 replicas, prefix-affinity": ["--replicas", "4", "--router", "prefix-affinity"],
    "2 lockstep ranks": ["--replicas", "2", "--dp-lockstep"],
    "1 prefill + 2 decode": ["--prefill-replicas", "1", "--decode-replicas", "2",
                             "--router", "prefix-affinity"],
}


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run_case(checkout: Path, name: str, argv: list[str], work: Path) -> tuple[str, dict]:
    """Run `python3 -m scheduler_sim ARGV` in `checkout` with outputs in a temporary
    folder; the digests of what it wrote, and its exit status."""
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        tmp_path = Path(tmp)
        argv = [a.replace("{tmp}", tmp) for a in argv]
        out = tmp_path / "stdout"
        with open(out, "wb") as sink:
            status = subprocess.run([sys.executable, "-m", "scheduler_sim", *argv],
                                    cwd=checkout, stdout=sink, stderr=subprocess.DEVNULL,
                                    env={**os.environ, "PYTHONPATH": str(checkout)}).returncode
        result = {"status": status, "stdout": digest(out)}
        for produced in sorted(tmp_path.iterdir()):
            if produced.name != "stdout":
                result[produced.name] = digest(produced)
        return name, result


def cases(traces: dict[str, Path]) -> list[tuple[str, list[str]]]:
    out = []
    for label, trace in traces.items():
        for policy in POLICIES:
            for prefix in ("--no-prefix-caching", "--prefix-caching"):
                out.append((f"{label} {policy} {prefix}", [
                    "replay", str(trace), "--policy", policy, prefix, *COMMON, "--json",
                    "--events", "{tmp}/events.jsonl", "--requests-csv", "{tmp}/requests.csv"]))
    for label, flags in FLEETS.items():
        out.append((f"mooncake vllm --prefix-caching {label}", [
            "replay", str(traces["mooncake"]), "--policy", "vllm", "--prefix-caching", *COMMON,
            *flags, "--json", "--events", "{tmp}/events.jsonl",
            "--requests-csv", "{tmp}/requests.csv"]))
    shipped_traces = [f"traces/{shipped.name}"  # (relative: runs start in the checkout)
                      for shipped in sorted((ROOT / "traces").glob("*.jsonl"))]
    for shipped in shipped_traces:
        for policy in POLICIES:
            out.append((f"{shipped} {policy}", [
                "replay", shipped, "--policy", policy, "--json", "--requests", "--quiet",
                "--events", "{tmp}/events.jsonl"]))
    for policy in COUNTING:
        for label, trace in traces.items():
            out.append((f"{label} {policy} without events", [
                "replay", str(trace), "--policy", policy, *COMMON, "--json",
                "--requests-csv", "{tmp}/requests.csv"]))
        for shipped in shipped_traces:
            out.append((f"{shipped} {policy} without events", [
                "replay", shipped, "--policy", policy, "--json", "--requests", "--quiet",
                "--requests-csv", "{tmp}/requests.csv"]))
    return out


def convert(checkout: Path, traces_dir: Path, work: Path, quick: bool) -> dict[str, Path]:
    sources = {"azure": ("azure", traces_dir / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"),
               "mooncake": ("mooncake", traces_dir / "mooncake" / "conversation_trace.jsonl")}
    out = {}
    for label, (kind, source) in sources.items():
        target = work / f"{label}_conv{'_quick' if quick else ''}.jsonl"
        if not target.exists():
            full = work / f"{label}_conv.jsonl"
            if not full.exists():
                subprocess.run([sys.executable, "-m", "scheduler_sim", "convert", "--from", kind,
                                str(source), "-o", str(full)], cwd=checkout, check=True,
                               env={**os.environ, "PYTHONPATH": str(checkout)})
            if quick:
                with open(full) as src, open(target, "w") as dst:
                    for n, line in enumerate(src):
                        if n >= 2000:
                            break
                        dst.write(line)
        out[label] = target
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces_dir", type=Path)
    parser.add_argument("-o", "--out", type=Path, help="write the manifest here")
    parser.add_argument("--against", type=Path, help="compare with this manifest")
    parser.add_argument("--checkout", type=Path, default=ROOT)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--work-dir", type=Path, default=ROOT / "benchmarks" / "out")
    args = parser.parse_args()
    if not args.out and not args.against:
        parser.error("give -o MANIFEST, --against MANIFEST, or both")
    # No output replaces an input: the manifest may not be the one compared with, nor
    # a source trace (the baseline is read before anything runs).
    if args.out:
        inputs = [args.traces_dir / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv",
                  args.traces_dir / "mooncake" / "conversation_trace.jsonl"]
        if args.against:
            inputs.append(args.against)
        if any(args.out.resolve() == path.resolve() for path in inputs):
            parser.error(f"-o {args.out} names an input of this run")
    baseline = json.loads(args.against.read_text()) if args.against else {}
    before = baseline.get("runs") if args.against else None
    # The JSON summaries name the trace's path: runs compare only with converted traces
    # in the same folder as the manifest's.
    work_dir = str(args.work_dir.resolve())
    if args.against and baseline.get("work_dir", work_dir) != work_dir:
        parser.error(f"{args.against} was made with --work-dir {baseline['work_dir']}, whose "
                     "path every JSON summary names: give the same --work-dir")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    checkout = args.checkout.resolve()
    traces = convert(checkout, args.traces_dir, args.work_dir, args.quick)
    todo = cases(traces)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = dict(pool.map(lambda c: run_case(checkout, c[0], c[1], args.work_dir), todo))
    manifest = {"checkout": str(checkout), "quick": args.quick, "work_dir": work_dir,
                "runs": {name: results[name] for name, _ in todo}}
    if args.out:
        args.out.write_text(json.dumps(manifest, indent=1) + "\n")
    if before is not None:
        differ = [name for name in manifest["runs"] if before.get(name) != manifest["runs"][name]]
        missing = [name for name in before if name not in manifest["runs"]]
        for name in differ:
            was, now = before.get(name, {}), manifest["runs"][name]
            parts = [k for k in sorted(set(was) | set(now)) if was.get(k) != now.get(k)]
            print(f"differs: {name} ({', '.join(parts)})")
        for name in missing:
            print(f"not run: {name}")
        print(f"{len(manifest['runs']) - len(differ)} of {len(manifest['runs'])} runs identical")
        return 1 if differ or missing else 0
    print(f"{len(manifest['runs'])} runs, manifest {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
