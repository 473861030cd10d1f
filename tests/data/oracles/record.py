#!/usr/bin/env python3
"""Record engine runs for tests/test_oracles.py: generate seeded traces, replay
each through a harness that drives the real vLLM or SGLang scheduler, and keep
the trace and the engine's dispatch, preemption and finish events.

This is a maintainer's tool: it needs a harness and its virtual environment
(see README.md beside this file); the tests need neither.

    python3 tests/data/oracles/record.py vllm --python VENV/bin/python \\
        --harness PATH/vllm_oracle.py --seeds 0-35
    python3 tests/data/oracles/record.py sglang --python VENV/bin/python \\
        --harness PATH/sglang_oracle.py --seeds 0-31
    python3 tests/data/oracles/record.py sglang --python VENV/bin/python \\
        --harness PATH/sglang_oracle.py --seeds 100-135 --requests 50 \\
        --prefix-caching-only
    python3 tests/data/oracles/record.py vllm --python VENV/bin/python \\
        --harness PATH/vllm_oracle.py --seeds 9000-9001 --requests 500 --scale

With --scale the traces are the harnesses' `randcompare.py --scale` traces of the
same seed (vLLM's with the order written into the config: fcfs on even seeds,
priority on odd ones), and the trace and events are kept gzipped.
    python3 tests/data/oracles/record.py sglang --python VENV/bin/python \\
        --harness PATH/sglang_oracle.py --seeds 400-403 --requests 30 --page 4
    python3 tests/data/oracles/record.py sglang --python VENV/bin/python \\
        --harness PATH/sglang_oracle.py --seeds 500-503 --requests 30 --page 16
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def vllm_trace(seed: int, n: int = 30) -> list[dict]:
    """Blocks of 2-16 tokens, 8-48 blocks, budgets of 16-256 tokens, prefix caching
    on half the traces (prompts sharing one of three prefixes), chunking on half,
    fcfs on even seeds and priority on odd ones, a prefill interval of 2-4 on one
    trace in four. Every request fits alone, and ids sort in file order (vLLM
    breaks priority ties by id)."""
    rng = random.Random(seed)
    size = rng.choice([2, 4, 8, 16])
    blocks = rng.randint(8, 48)
    config = {"type": "config", "block_size": size, "num_blocks": blocks,
              "token_budget": rng.choice([16, 32, 64, 256]), "max_rows": rng.randint(2, 16),
              "prefix_caching": rng.random() < 0.5,
              "order": "priority" if seed % 2 else "fcfs"}
    if rng.random() < 0.5:
        config["prefill_chunk"] = rng.choice([4, 8, 16])
    if seed % 4 == 3:
        config["prefill_interval"] = rng.choice([2, 3, 4])
    config["max_rows"] = min(config["max_rows"], config["token_budget"])
    records = [config]
    prefixes = [[rng.randint(1, 50) for _ in range(rng.randint(1, 3) * size)] for _ in range(3)]
    for i in range(n):
        cap = blocks * size
        prompt = rng.randint(1, max(1, min(60, cap // 2)))
        outputs = rng.randint(1, max(1, min(30, cap - prompt + 1)))
        if -(-(prompt + outputs - 1) // size) > blocks:
            continue
        ids = [1000 + 7 * i + k for k in range(prompt)]
        if config["prefix_caching"] and rng.random() < 0.5:
            shared = rng.choice(prefixes)[:prompt]
            ids = shared + ids[len(shared):]
        records.append({"type": "request", "id": f"r{i:04d}", "arrival": rng.randint(0, 40),
                        "prompt_tokens": prompt, "output_tokens": outputs,
                        "priority": rng.randint(0, 3), "prompt_token_ids": ids,
                        "output_token_ids": [500000 + 100 * i + k for k in range(outputs)]})
    return records


def sglang_trace(seed: int, n: int = 14) -> list[dict]:
    """Pages of one token (SGLang's page size 1), pools of 40-160 tokens, budgets
    and chunks of 8-256, a conservativeness of 0.3-2 on some traces; one trace in
    three with prefix caching and shared prompt prefixes, half of those in
    SGLang's lpm order."""
    rng = random.Random(seed)
    pool = rng.randint(40, 160)
    config = {"type": "config", "block_size": 1, "num_blocks": pool,
              "token_budget": rng.choice([16, 32, 64, 256]), "max_rows": rng.randint(2, 12)}
    config["prefill_chunk"] = min(config["token_budget"], rng.choice([8, 16, 64, 256]))
    if rng.random() < 0.3:
        config["schedule_conservativeness"] = rng.choice([0.3, 0.5, 2.0])
    caching = seed % 3 == 2
    if caching:
        config["prefix_caching"] = True
        config["order"] = "lpm" if seed % 2 else "fcfs"
    records = [config]
    prefixes = [[rng.randint(1, 50) for _ in range(rng.randint(4, 12))] for _ in range(2)]
    for i in range(n):
        prompt = rng.randint(1, min(60, pool // 2))
        outputs = rng.randint(1, max(1, min(40, pool - prompt - 2)))
        record = {"type": "request", "id": f"r{i:03d}", "arrival": rng.randint(0, 30),
                  "prompt_tokens": prompt, "output_tokens": outputs}
        if caching:
            ids = [1000 + 7 * i + k for k in range(prompt)]
            if rng.random() < 0.6:
                shared = rng.choice(prefixes)[:prompt]
                ids = shared + ids[len(shared):]
            record["prompt_token_ids"] = ids
        records.append(record)
    return records


def _scale_prompt(rng: random.Random, i: int, prompt: int, heads: list[list[int]]) -> dict:
    """Half the prompts start with one of the shared heads; the rest of such a prompt
    repeats one id of its own (unique, and small once gzipped). The other half give no
    ids, so the harness and the simulator fill ids of their own that nothing shares."""
    if rng.random() < 0.5:
        head = rng.choice(heads)[:prompt]
        return {"prompt_token_ids": head + [2000000 + i] * (prompt - len(head))}
    return {}


def vllm_scale_trace(seed: int, n: int = 500) -> list[dict]:
    """At scale: blocks of 8, 16 or 32 tokens in a pool of 2000-8000 tokens, budgets of
    256-2048, 8-48 rows, a long-prefill threshold of 64-256 on half the traces, prefix
    caching on, four shared prompt heads of 1-12 blocks. One prompt in four is long
    (512 tokens up to a third of the pool: several chunks), the rest 16-300 tokens;
    outputs 1-96; arrivals over 100, 400 or 1500 ticks; fcfs on even seeds, priority on
    odd ones. Every request fits alone."""
    rng = random.Random(seed)
    size = rng.choice([8, 16, 32])
    blocks = rng.randint(2000, 8000) // size
    config = {"type": "config", "block_size": size, "num_blocks": blocks,
              "token_budget": rng.choice([256, 512, 1024, 2048]), "max_rows": rng.randint(8, 48),
              "prefix_caching": True}
    if rng.random() < 0.5:
        config["prefill_chunk"] = rng.choice([64, 128, 256])
    config["order"] = "priority" if seed % 2 else "fcfs"
    span = rng.choice([100, 400, 1500])
    heads = [[rng.randint(1, 50000) for _ in range(rng.randint(1, 12) * size)] for _ in range(4)]
    records = [config]
    for i in range(n):
        if rng.random() < 0.25:
            prompt = rng.randint(512, max(512, blocks * size // 3))
        else:
            prompt = rng.randint(16, 300)
        outputs = rng.randint(1, 96)
        if -(-(prompt + outputs - 1) // size) > blocks:
            continue
        record = {"type": "request", "id": f"r{i:04d}", "arrival": rng.randint(0, span),
                  "prompt_tokens": prompt, "output_tokens": outputs,
                  "priority": rng.randint(0, 3)}
        record.update(_scale_prompt(rng, i, prompt, heads))
        records.append(record)
    return records


def sglang_scale_trace(seed: int, n: int = 500) -> list[dict]:
    """At scale: pages of one token, a pool of 2000-8000 tokens, budgets of 512-4096,
    chunks of 128-512, 8-48 rows, a conservativeness of 0.5 or 2 on some traces, the
    radix cache on, fcfs or lpm, four shared prompt heads of 16-400 tokens. Prompts,
    outputs and arrivals as in `vllm_scale_trace`."""
    rng = random.Random(seed)
    pool = rng.randint(2000, 8000)
    config = {"type": "config", "block_size": 1, "num_blocks": pool,
              "token_budget": rng.choice([512, 1024, 2048, 4096]), "max_rows": rng.randint(8, 48),
              "prefix_caching": True, "order": rng.choice(["fcfs", "lpm"])}
    config["prefill_chunk"] = min(config["token_budget"], rng.choice([128, 256, 512]))
    if rng.random() < 0.3:
        config["schedule_conservativeness"] = rng.choice([0.5, 2.0])
    span = rng.choice([100, 400, 1500])
    heads = [[rng.randint(1, 50000) for _ in range(rng.randint(16, 400))] for _ in range(4)]
    records = [config]
    for i in range(n):
        if rng.random() < 0.25:
            prompt = rng.randint(512, max(512, pool // 3))
        else:
            prompt = rng.randint(16, 300)
        outputs = rng.randint(1, 96)
        record = {"type": "request", "id": f"r{i:04d}", "arrival": rng.randint(0, span),
                  "prompt_tokens": prompt, "output_tokens": outputs}
        record.update(_scale_prompt(rng, i, prompt, heads))
        records.append(record)
    return records


def sglang_paged_trace(seed: int, n: int = 20, page: int = 4) -> list[dict]:
    """Pages of `page` tokens (the trace's block_size, SGLang's page_size): a pool of
    40-160 tokens rounded down to whole pages (at least 4), a budget of 2-16 pages and a
    chunk of 1-16 pages (at most the budget), 2-12 rows, a conservativeness of 0.3-2 on
    some traces; prefix caching on, fcfs or lpm, prompts sharing one of three heads of
    1-3 pages and a part of one. Every request passes admission alone (its prompt in
    whole pages, its outputs and a page stay below the pool), so SGLang never cuts its
    max_new_tokens."""
    rng = random.Random(seed)
    pages = max(4, rng.randint(40, 160) // page)
    pool = pages * page
    config = {"type": "config", "block_size": page, "num_blocks": pages,
              "token_budget": page * rng.choice([2, 4, 8, 16]), "max_rows": rng.randint(2, 12),
              "prefix_caching": True, "order": rng.choice(["fcfs", "lpm"])}
    config["prefill_chunk"] = min(config["token_budget"], page * rng.choice([1, 2, 4, 16]))
    if rng.random() < 0.3:
        config["schedule_conservativeness"] = rng.choice([0.3, 0.5, 2.0])
    heads = [[rng.randint(1, 40) for _ in range(page * rng.randint(1, 3) + rng.randint(0, page - 1))]
             for _ in range(3)]
    records = [config]
    for i in range(n):
        prompt = rng.randint(1, min(60, pool // 2))
        head = rng.choice(heads)[:max(1, prompt - 1)]
        ids = head + [100000 + 100 * i + k for k in range(max(1, prompt - len(head)))]
        whole = -(-len(ids) // page) * page
        outputs = rng.randint(1, max(1, min(40, pool - whole - page - 1)))
        records.append({"type": "request", "id": f"r{i:03d}", "arrival": rng.randint(0, 30),
                        "prompt_tokens": len(ids), "output_tokens": outputs,
                        "prompt_token_ids": ids})
    return records


KEEP = {"dispatch", "preempted", "retracted", "finished"}


def keep_events(path: Path) -> list[str]:
    """The engine's dispatch (id and tokens per row), preemption and finish records."""
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        event = json.loads(line)
        kind = event.get("event")
        if kind == "dispatch":
            rows = [{"id": r["id"], "tokens": r["tokens"]} for r in event["rows"]]
            out.append(json.dumps({"tick": event["tick"], "event": kind, "rows": rows}))
        elif kind in ("preempted", "finished"):
            out.append(json.dumps({"tick": event["tick"], "event": kind, "id": event["id"]}))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engine", choices=("vllm", "sglang"))
    parser.add_argument("--python", required=True, help="the harness's virtual environment")
    parser.add_argument("--harness", required=True, help="vllm_oracle.py or sglang_oracle.py")
    parser.add_argument("--seeds", default="0-35", help="FIRST-LAST")
    parser.add_argument("--requests", type=int, default=None,
                        help="requests per trace (default: 30 for vllm, 14 for sglang)")
    parser.add_argument("--prefix-caching-only", action="store_true",
                        help="keep only the seeds whose trace has prefix caching on")
    parser.add_argument("--scale", action="store_true",
                        help="the traces at scale (vllm_scale_trace, sglang_scale_trace), "
                             "kept gzipped")
    parser.add_argument("--page", type=int, default=1,
                        help="sglang: pages of this many tokens (sglang_paged_trace)")
    args = parser.parse_args()
    first, last = (int(x) for x in args.seeds.split("-"))
    out_dir = HERE / args.engine
    out_dir.mkdir(exist_ok=True)
    if args.scale:
        make = vllm_scale_trace if args.engine == "vllm" else sglang_scale_trace
    elif args.engine == "sglang" and args.page > 1:
        def make(seed, n=20):
            return sglang_paged_trace(seed, n, args.page)
    else:
        make = vllm_trace if args.engine == "vllm" else sglang_trace
    suffix = ".gz" if args.scale else ""
    jobs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(first, last + 1):
            records = make(seed) if args.requests is None else make(seed, args.requests)
            if args.prefix_caching_only and not records[0].get("prefix_caching"):
                continue
            trace = Path(tmp) / f"{seed:03d}.jsonl"
            trace.write_text("".join(json.dumps(r) + "\n" for r in records))
            jobs.append((seed, str(trace), str(Path(tmp) / f"{seed}.events"),
                         records[0].get("order", "fcfs")))
        # One process for every trace: the harness's imports take seconds.
        driver = Path(tmp) / "driver.py"
        driver.write_text(DRIVER)
        run = subprocess.run([args.python, str(driver), args.harness, json.dumps(jobs)],
                             capture_output=True, text=True, timeout=7200)
        status = dict(json.loads(line) for line in run.stdout.splitlines()
                      if line.startswith("["))
        for seed, trace, events, _ in jobs:
            if status.get(str(seed)) != 0:
                print(f"seed {seed}: harness exit {status.get(str(seed))}; not kept")
                continue
            write(out_dir / f"{seed:03d}.jsonl{suffix}", Path(trace).read_text())
            write(out_dir / f"{seed:03d}.events.jsonl{suffix}",
                  "\n".join(keep_events(Path(events))) + "\n")
            print(f"seed {seed}: recorded", flush=True)
        if run.returncode != 0:
            print(run.stderr[-2000:])
    return 0


def write(path: Path, text: str) -> None:
    """`text` into `path`, gzipped when the name ends in .gz (with no time stamp in the
    header, so the same run gives the same bytes)."""
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))
    else:
        path.write_text(text)


DRIVER = """
import contextlib, importlib.util, io, json, os, sys
harness, jobs = sys.argv[1], json.loads(sys.argv[2])
sys.path.insert(0, os.path.dirname(os.path.abspath(harness)))
spec = importlib.util.spec_from_file_location("oracle", harness)
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)
for seed, trace, events, order in jobs:
    if hasattr(oracle, "ABORTED"):
        oracle.ABORTED.clear()
    code = 0
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            result = oracle.main(["replay", trace, "--events", events, "--order", order])
            code = result or 0
        except SystemExit as exc:
            code = exc.code or 0
    print(json.dumps([str(seed), code]), flush=True)
"""


if __name__ == "__main__":
    sys.exit(main())
