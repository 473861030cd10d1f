"""Importing a real vLLM run as the BLIS project publishes it (`convert --from blis-run`).

A run is a JSON document (inference-sim/training `replay_data/RUN.json`,
gzipped or not): the server's settings in `config`, the model's id, the
upstream `split`, and `requests` in arrival order (`index`,
`arrival_time_us`, `input_tokens`, `output_tokens`, `has_error`). The
client side comes from inference-perf's resolved config
(`inference_perf.ClientConfig`), and the measured latencies from the run's
`RUN_ground_truth.json` (`index`, `has_error`, `e2e_s`, `ttft_s`).

What the trace says (docs/real-vllm-runs.md has the evidence):

- one `config` record: policy `vllm`, prefix caching, the run's block size,
  its real GPU block count, `max_num_batched_tokens`, `max_num_seqs`, tp,
  the model's catalogue name and the GPU, times in seconds;
- one `request` per listed request, id `blis-run-<index>`, arriving at
  its `arrival_time_us` (less the first), exactly; `prompt_tokens` the
  client's count (vLLM tokenises the same text with the same tokenizer);
  `output_tokens` the profile's `output_len`: with `ignore_eos` every
  request generates exactly that many (the request lists' `output_tokens`
  is the client's re-tokenised count of the text, M, which no metric the
  simulator compares uses);
- `block_hashes` (16-token entries) giving each of the client's prompts its
  own chain, so that a prompt sent again finds its blocks as vLLM did
  (`assign_prompts`);
- a `cancel` at arrival + the client timeout for every request the client
  gave up on (`has_error`: every one of them ran 300 to 301 s).

The measured side (`measured_records`): one object per completed request,
`{"id", "ttft", "e2e", "client_output_tokens"}`; errored requests are left
out (their cancel is in the trace).

Every problem is `file:line: ...` (the line of the request object in the
document) and fatal: a run is converted whole or not at all.

This module reads and checks the run and writes the trace; the document is
read by `json_document`, the prompts matched by `blis_prompts`, and the
measured side is `blis_measured`'s.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..gpu.gpus import GpuSpec
from ..gpu.models import ModelSpec
from ..records.errors import TraceError
from ..records.option_values import show
from .blis_prompts import Prompts, assign_prompts
from .inference_perf import ClientConfig
from .json_document import JSONDocument
from .problems import capped

__all__ = ["MODEL_NAMES", "SPLITS", "RunConversion", "convert_run", "read_run", "Run",
           "ID_PREFIX", "model_name", "implied_reserve", "integer_in",
           "VLLM_MEMORY_UTILIZATION"]

ID_PREFIX = "blis-run-"
GIB = 2 ** 30
# vLLM's default gpu_memory_utilization; the runs' launch arguments do not set it.
VLLM_MEMORY_UTILIZATION = 0.9
SPLITS = ("train", "validate", "test")
# Hugging Face ids of the published runs -> the model catalogue's names.
MODEL_NAMES = {
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "codellama/CodeLlama-34b-Instruct-hf": "codellama-34b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
}
# The most a request's arrival may be, in microseconds: 1e14 s, so that with a client
# timeout (at most 1e9 s) every time written stays below a trace's 1e15.
_MAX_US = 10 ** 20


def integer_in(value: Any, low: int = 0, high: int = 10 ** 9) -> bool:
    """Whether a JSON value is an integer from `low` to `high` (true and false are not)."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


@dataclasses.dataclass
class Run:
    """A run's settings and requests, checked."""

    experiment: str
    model_id: str
    split: str
    tp: int
    max_num_seqs: int
    max_num_batched_tokens: int
    blocks: int
    block_size: int
    indices: list[int]
    arrivals_us: list[int]
    prompts: list[int]          # the client's count; 0 when it errored before counting
    client_outputs: list[int]   # the client's re-tokenised count of the text
    errors: list[bool]
    lines: list[int]


_CONFIG_FIELDS = ("tensor_parallelism", "max_num_seqs", "max_num_batched_tokens",
                  "kv_blocks_total_gpu", "block_size")
_REQUEST_FIELDS = ("index", "arrival_time_us", "input_tokens", "output_tokens", "has_error")


def read_run(text: str, name: str) -> Run:
    """The run in `text` (a run JSON document), every field checked; TraceError with
    every problem (`name:line: ...`, at most MAX_PROBLEMS and a count of the rest)."""
    top, items = JSONDocument(text, name).read("requests")
    problems: list[str] = []
    where = f"{name}:1"
    for key in ("experiment", "model_id", "split"):
        if not isinstance(top.get(key), str) or not top.get(key):
            problems.append(f"{where}: {key} must be a non-empty string, got "
                            f"{show(top.get(key)) if key in top else 'nothing'}")
    if isinstance(top.get("split"), str) and top["split"] and top["split"] not in SPLITS:
        problems.append(f"{where}: split must be one of {', '.join(SPLITS)}, got "
                        f"{show(top['split'])}")
    config = top.get("config")
    if not isinstance(config, dict):
        problems.append(f"{where}: config must be an object of the server's settings, got "
                        f"{show(config) if 'config' in top else 'nothing'}")
        config = {}
    for key in _CONFIG_FIELDS:
        if not integer_in(config.get(key), 1):
            problems.append(f"{where}: config.{key} must be an integer >= 1, got "
                            f"{show(config.get(key)) if key in config else 'nothing'}")
    for key in ("num_prefix_groups", "users_per_group", "system_prompt_len"):
        if config.get(key, 0) != 0:
            problems.append(f"{where}: config.{key} must be 0 (prompt sharing comes from the "
                            f"client config), got {show(config[key])}")
    if "requests" not in top:
        problems.append(f"{where}: requests is missing")
    elif top["requests"] is not None:
        problems.append(f"{where}: requests must be a list, got {show(top['requests'])}")
    run = Run(top.get("experiment"), top.get("model_id"), top.get("split"),
              config.get("tensor_parallelism"), config.get("max_num_seqs"),
              config.get("max_num_batched_tokens"), config.get("kv_blocks_total_gpu"),
              config.get("block_size"), [], [], [], [], [], [])
    previous = 0
    for position, (line, req) in enumerate(items):
        bad = _request_problems(req, position, previous)
        problems += [f"{name}:{line}: requests[{position}]: {p}" for p in bad]
        if isinstance(req, dict) and integer_in(req.get("arrival_time_us"), 0, _MAX_US):
            previous = req["arrival_time_us"]  # order is checked pair by pair
        if bad:
            continue
        run.indices.append(req["index"])
        run.arrivals_us.append(req["arrival_time_us"])
        run.prompts.append(req["input_tokens"])
        run.client_outputs.append(req["output_tokens"])
        run.errors.append(req["has_error"])
        run.lines.append(line)
    if not items and not problems:
        problems.append(f"{where}: requests is empty")
    if problems:
        raise TraceError(capped(problems, name))
    return run


def _request_problems(req: Any, position: int, previous: int) -> list[str]:
    if not isinstance(req, dict):
        return [f"expected an object, got {show(req)}"]
    out = []
    for key in _REQUEST_FIELDS:
        if key not in req:
            out.append(f"{key} is missing")
    if out:
        return out
    if req["index"] != position or not integer_in(req["index"]):
        out.append(f"index must be the request's position ({position}), got {show(req['index'])}")
    arrival = req["arrival_time_us"]
    if not integer_in(arrival, 0, _MAX_US):
        out.append(f"arrival_time_us must be an integer of microseconds from 0 to 1e20, "
                   f"got {show(arrival)}")
    elif arrival < previous:
        out.append(f"arrival_time_us must not be before the previous request's ({previous}): "
                   f"requests are listed in the order they were sent, got {arrival}")
    if not isinstance(req["has_error"], bool):
        out.append(f"has_error must be true or false, got {show(req['has_error'])}")
    for key in ("input_tokens", "output_tokens"):
        if not integer_in(req[key]):
            out.append(f"{key} must be an integer >= 0, got {show(req[key])}")
    if req["input_tokens"] == 0 and req["has_error"] is False:
        out.append("input_tokens must be >= 1 for a request without an error, got 0")
    if req.get("prefix_group", "") != "":
        out.append(f"prefix_group must be empty (prompt sharing comes from the client "
                   f"config), got {show(req['prefix_group'])}")
    return out



def _seconds(us: int) -> int | float:
    seconds = us / 10 ** 6  # int / int: the float nearest the exact quotient
    return int(seconds) if seconds.is_integer() else seconds


@dataclasses.dataclass
class RunConversion:
    """A converted run: the trace's records and what the conversion found."""

    records: list[dict[str, Any]]
    run: Run
    prompts: Prompts
    client: ClientConfig
    model: str
    gpu: str

    def note(self) -> str:
        """One line for the terminal: what was converted and how prompts matched."""
        run, p = self.run, self.prompts
        errors = sum(run.errors)
        text = (f"converted {len(run.indices):,} requests from blis-run ({self.model} on "
                f"{self.gpu}, tp {run.tp}, split {run.split}): {self.client.output_len} output "
                f"tokens each (ignore_eos); {self.client.prompts} prompts round robin: "
                f"{p.in_place:,} in place, {p.moved:,} from a neighbouring position, "
                f"{p.unmatched:,} unmatched")
        if p.filled:
            text += f", {p.filled:,} errored before their prompt was counted"
        if errors:
            text += (f"; {errors:,} errored request{'s' if errors > 1 else ''} cancelled "
                     f"{self.client.timeout:g} s after arrival")
        return text


def model_name(run: Run, name: str, model: str | None = None) -> str:
    """The catalogue name of the run's model (`model` when given); TraceError when its
    id has none."""
    if model is not None:
        return model
    if run.model_id not in MODEL_NAMES:
        raise TraceError([f"{name}:1: model_id {show(run.model_id)} has no catalogue name "
                          f"(known: {', '.join(MODEL_NAMES)}); name one with --model"])
    return MODEL_NAMES[run.model_id]


def implied_reserve(run: Run, model: ModelSpec, gpu: GpuSpec) -> float | None:
    """GiB per GPU that vLLM's memory profile left beside the weights and the run's KV
    blocks, at vLLM's default gpu_memory_utilization (0.9): 0.9 x memory - weights / tp
    - blocks x block bytes, rounded down to 0.01 GiB (None when negative: the model's
    weights and those blocks do not fit the GPU as the catalogue describes them)."""
    usable = VLLM_MEMORY_UTILIZATION * gpu.memory_gib * GIB
    kv = run.blocks * run.block_size * model.kv_bytes_per_token_per_gpu(run.tp)
    left = (usable - model.weight_bytes / run.tp - kv) / GIB
    return math.floor(left * 100) / 100 if left >= 0 else None


def convert_run(run: Run, client: ClientConfig, name: str, model: str,
                gpu: str = "h100-sxm", specs: tuple[ModelSpec, GpuSpec] | None = None
                ) -> RunConversion:
    """The trace v1 records of a checked run (see the module's docstring): `model` and
    `gpu` as the config record names them; with their `specs`, the config also gets
    the `activation_reserve` the run's block count implies (`implied_reserve`), so
    that the pool vLLM measured fits the GPU when a cost model checks it."""
    prompts = assign_prompts(run, client, name)
    size = run.block_size
    config = {"type": "config", "time_unit": "s", "policy": "vllm", "prefix_caching": True,
              "block_size": size, "hash_block_size": size, "num_blocks": run.blocks,
              "token_budget": run.max_num_batched_tokens, "max_rows": run.max_num_seqs,
              "tp": run.tp, "model": model, "gpu": gpu}
    reserve = implied_reserve(run, *specs) if specs is not None else None
    if reserve is not None:
        config["activation_reserve"] = reserve
    records: list[dict[str, Any]] = [config]
    # Entries of prompt s are s x stride + j: the first entry alone already tells
    # prompts apart (keys are chained), and the stride keeps the numbers readable.
    stride = 10 ** max(3, len(str(max(prompts.lengths) // size)))
    start = run.arrivals_us[0]
    cancels = []
    for i, index in enumerate(run.indices):
        rid = f"{ID_PREFIX}{index}"
        us = run.arrivals_us[i] - start
        record: dict[str, Any] = {"type": "request", "id": rid, "arrival": _seconds(us),
                                  "prompt_tokens": prompts.lengths[i],
                                  "output_tokens": client.output_len}
        slot = prompts.slots[i]
        if slot is not None and prompts.lengths[i] >= size:
            record["block_hashes"] = [slot * stride + j
                                      for j in range(prompts.lengths[i] // size)]
        records.append(record)
        if run.errors[i]:
            at = us + round(client.timeout * 10 ** 6)
            cancels.append({"type": "cancel", "id": rid, "at": _seconds(at)})
    return RunConversion(records + cancels, run, prompts, client, model, gpu)
