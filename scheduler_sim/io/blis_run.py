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
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import Counter
from typing import Any

from ..gpu.gpus import GpuSpec
from ..gpu.models import ModelSpec
from ..records.errors import TraceError
from ..records.options import show
from .inference_perf import ClientConfig
from .json_lines import unique_keys
from .problems import MAX_PROBLEMS

__all__ = ["MODEL_NAMES", "SPLITS", "RunConversion", "convert_run", "assign_prompts",
           "measured_records", "parse_measured", "read_run", "Run", "Prompts", "NEIGHBOURS",
           "ID_PREFIX", "MEASURED_KEYS", "model_name", "implied_reserve",
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
# Positions either side, nearest first, where a request whose prompt length is not its
# slot's may find its slot: requests scheduled a few ms apart can reach the server
# swapped (every mismatch of the 16 published runs is within 2).
NEIGHBOURS = (1, -1, 2, -2)
# The most a request's arrival may be, in microseconds: 1e14 s, so that with a client
# timeout (at most 1e9 s) every time written stays below a trace's 1e15.
_MAX_US = 10 ** 20
_WS = re.compile(r"[ \t\n\r]*")


class _Refused(ValueError):
    """A JSON constant (NaN, Infinity) the files never hold."""


def _refuse(name: str) -> Any:
    raise _Refused(f"{name} is not a number a run holds")


_DECODER = json.JSONDecoder(object_pairs_hook=unique_keys, parse_constant=_refuse)


class _Document:
    """A JSON document read element by element: the top level's values, and the
    items of one list with the line each starts on."""

    def __init__(self, text: str, name: str) -> None:
        self.text = text
        self.name = name
        self._pos = 0
        self._line = 1

    def line_at(self, pos: int) -> int:
        self._line += self.text.count("\n", self._pos, pos)
        self._pos = pos
        return self._line

    def fail(self, pos: int, what: str) -> TraceError:
        return TraceError([f"{self.name}:{self.line_at(pos)}: {what}"])

    def skip(self, pos: int) -> int:
        return _WS.match(self.text, pos).end()

    def value(self, pos: int) -> tuple[Any, int]:
        try:
            return _DECODER.raw_decode(self.text, pos)
        except RecursionError:
            raise self.fail(pos, "JSON nested too deeply") from None
        except json.JSONDecodeError as exc:
            raise TraceError([f"{self.name}:{exc.lineno}: invalid JSON: {exc.msg} at "
                              f"column {exc.colno}"]) from None
        except ValueError as exc:
            raise self.fail(pos, f"invalid JSON: {exc}") from None

    def items(self, pos: int) -> tuple[list[tuple[int, Any]], int]:
        """The items of the list opening at `pos`, each (line, value)."""
        out = []
        pos = self.skip(pos + 1)
        if self.text.startswith("]", pos):
            return out, pos + 1
        while True:
            line = self.line_at(pos)
            item, pos = self.value(pos)
            out.append((line, item))
            pos = self.skip(pos)
            if self.text.startswith("]", pos):
                return out, pos + 1
            if not self.text.startswith(",", pos):
                raise self.fail(pos, "invalid JSON: expected ',' or ']' in a list")
            pos = self.skip(pos + 1)

    def read(self, list_key: str | None) -> tuple[dict[str, Any], list[tuple[int, Any]]]:
        """A top-level object whose `list_key` list is read item by item, or (with
        `list_key` None) a top-level list."""
        text = self.text[1:] if self.text.startswith("\ufeff") else self.text
        self.text = text
        pos = self.skip(0)
        if list_key is None:
            if not text.startswith("[", pos):
                raise self.fail(pos, "expected a JSON list of per-request objects")
            items, pos = self.items(pos)
            top: dict[str, Any] = {}
        else:
            if not text.startswith("{", pos):
                raise self.fail(pos, "expected a JSON object (a run of inference-sim/training)")
            top, items, pos = self._object(pos, list_key)
        pos = self.skip(pos)
        if pos < len(text):
            raise self.fail(pos, "invalid JSON: text after the document")
        return top, items

    def _object(self, pos: int, list_key: str):
        top: dict[str, Any] = {}
        items: list[tuple[int, Any]] = []
        pos = self.skip(pos + 1)
        if self.text.startswith("}", pos):
            return top, items, pos + 1
        while True:
            key, pos = self.value(pos)
            if not isinstance(key, str):
                raise self.fail(pos, "invalid JSON: expected a key")
            if key in top:
                raise self.fail(pos, f"invalid JSON: duplicate key {key!r}")
            pos = self.skip(pos)
            if not self.text.startswith(":", pos):
                raise self.fail(pos, "invalid JSON: expected ':'")
            pos = self.skip(pos + 1)
            if key == list_key and self.text.startswith("[", pos):
                items, pos = self.items(pos)
                top[key] = None
            else:
                top[key], pos = self.value(pos)
            pos = self.skip(pos)
            if self.text.startswith("}", pos):
                return top, items, pos + 1
            if not self.text.startswith(",", pos):
                raise self.fail(pos, "invalid JSON: expected ',' or '}'")
            pos = self.skip(pos + 1)


def _integer(value: Any, low: int = 0, high: int = 10 ** 9) -> bool:
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
    top, items = _Document(text, name).read("requests")
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
        if not _integer(config.get(key), 1):
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
        if isinstance(req, dict) and _integer(req.get("arrival_time_us"), 0, _MAX_US):
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
        raise TraceError(_capped(problems, name))
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
    if req["index"] != position or not _integer(req["index"]):
        out.append(f"index must be the request's position ({position}), got {show(req['index'])}")
    arrival = req["arrival_time_us"]
    if not _integer(arrival, 0, _MAX_US):
        out.append(f"arrival_time_us must be an integer of microseconds from 0 to 1e20, "
                   f"got {show(arrival)}")
    elif arrival < previous:
        out.append(f"arrival_time_us must not be before the previous request's ({previous}): "
                   f"requests are listed in the order they were sent, got {arrival}")
    if not isinstance(req["has_error"], bool):
        out.append(f"has_error must be true or false, got {show(req['has_error'])}")
    for key in ("input_tokens", "output_tokens"):
        if not _integer(req[key]):
            out.append(f"{key} must be an integer >= 0, got {show(req[key])}")
    if req["input_tokens"] == 0 and req["has_error"] is False:
        out.append("input_tokens must be >= 1 for a request without an error, got 0")
    if req.get("prefix_group", "") != "":
        out.append(f"prefix_group must be empty (prompt sharing comes from the client "
                   f"config), got {show(req['prefix_group'])}")
    return out


def _capped(problems: list[str], name: str) -> list[str]:
    if len(problems) <= MAX_PROBLEMS:
        return problems
    return problems[:MAX_PROBLEMS] + [f"{name}: ... and {len(problems) - MAX_PROBLEMS:,} "
                                      "more errors"]


@dataclasses.dataclass
class Prompts:
    """Which of the client's prompts each request sent (`assign_prompts`)."""

    slots: list[int | None]     # the prompt of each request; None: not matched
    lengths: list[int]          # its prompt tokens
    in_place: int = 0           # requests whose prompt is their position's
    moved: int = 0              # matched to a neighbouring position's prompt
    unmatched: int = 0          # no prompt of theirs or a neighbour's has their length
    filled: int = 0             # errored before counting: the prompt's usual length


def assign_prompts(run: Run, client: ClientConfig, name: str) -> Prompts:
    """The prompt each request sent, from the client's round robin.

    inference-perf sends the n-th request of a stage (n from 0) prompt n mod
    `client.prompts`, and the run lists requests in the order they reached
    the server, so request i nominally sent the prompt of its position in its
    stage. A prompt's length is the most common positive `input_tokens` of
    its positions (ties to the smaller). A request whose length is not its
    prompt's was overtaken or overtook: it takes the prompt of the nearest
    position (NEIGHBOURS, same stage) whose prompt has its length, or none
    (its blocks then match only itself). A request that errored before the
    client counted its prompt (`input_tokens` 0) sent its position's prompt,
    at that prompt's length.
    """
    counts = client.stage_requests
    if sum(counts) != len(run.indices):
        sizes = " + ".join(f"{c:,}" for c in counts)
        raise TraceError([f"{name}: the client config's stages send {sum(counts):,} "
                          f"requests (int(rate x duration) each: {sizes}), the run lists "
                          f"{len(run.indices):,}: not this run's config?"])
    nominal: list[int] = []
    stage_of: list[int] = []
    for stage, count in enumerate(counts):
        nominal += [n % client.prompts for n in range(count)]
        stage_of += [stage] * count
    seen: list[Counter] = [Counter() for _ in range(client.prompts)]
    for slot, length in zip(nominal, run.prompts):
        if length > 0:
            seen[slot][length] += 1
    usual = [min(c, key=lambda n: (-c[n], n)) if c else None for c in seen]
    out = Prompts([], [])
    problems = []
    for i, length in enumerate(run.prompts):
        slot = nominal[i]
        if length == 0:
            if usual[slot] is None:
                problems.append(f"{name}:{run.lines[i]}: requests[{i}]: errored before the "
                                f"client counted its prompt, and no request of its prompt "
                                f"({slot}) has a known length")
                continue
            out.slots.append(slot)
            out.lengths.append(usual[slot])
            out.filled += 1
            continue
        out.lengths.append(length)
        if usual[slot] == length:
            out.slots.append(slot)
            out.in_place += 1
            continue
        for step in NEIGHBOURS:
            j = i + step
            if 0 <= j < len(nominal) and stage_of[j] == stage_of[i] \
                    and usual[nominal[j]] == length:
                out.slots.append(nominal[j])
                out.moved += 1
                break
        else:
            out.slots.append(None)
            out.unmatched += 1
    if problems:
        raise TraceError(_capped(problems, name))
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


def measured_records(text: str, name: str, run: Run) -> list[dict[str, Any]]:
    """The measured side of a run from its ground-truth document: one object per
    request that completed, in the run's order: `id`, `ttft` and `e2e` in seconds
    (as measured by the client, from sending to the first and the last streamed
    event), and `client_output_tokens`. Each entry must name the same request and
    error flag as the run; TraceError with every problem otherwise."""
    _, items = _Document(text, name).read(None)
    problems = []
    out = []
    if len(items) != len(run.indices):
        problems.append(f"{name}:1: {len(items):,} entries, the run has "
                        f"{len(run.indices):,} requests")
    for position, ((line, entry), index, error, client) in enumerate(
            zip(items, run.indices, run.errors, run.client_outputs)):
        where = f"{name}:{line}: [{position}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: expected an object, got {show(entry)}")
            continue
        bad = []
        if entry.get("index") != index or not _integer(entry.get("index")):
            bad.append(f"index must be the run's {index}, got {show(entry.get('index'))}")
        if entry.get("has_error") is not error:
            bad.append(f"has_error must be the run's {show(error)}, got "
                       f"{show(entry.get('has_error'))}")
        keys = ("e2e_s",) if error else ("ttft_s", "e2e_s")
        for key in keys:
            value = entry.get(key)
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not math.isfinite(value) or not 0 <= value <= 1e9):
                bad.append(f"{key} must be a number of seconds from 0 to 1e9, got "
                           f"{show(value) if key in entry else 'nothing'}")
        if not bad and not error and entry["ttft_s"] > entry["e2e_s"]:
            bad.append(f"ttft_s must be at most e2e_s ({entry['e2e_s']!r}), got "
                       f"{entry['ttft_s']!r}")
        problems += [f"{where}: {p}" for p in bad]
        if not bad and not error:
            out.append({"id": f"{ID_PREFIX}{index}", "ttft": float(entry["ttft_s"]),
                        "e2e": float(entry["e2e_s"]), "client_output_tokens": client})
    if problems:
        raise TraceError(_capped(problems, name))
    return out


MEASURED_KEYS = ("id", "ttft", "e2e", "client_output_tokens")


def parse_measured(text: str, name: str) -> list[dict[str, Any]]:
    """The records of a measured file (JSONL, one completed request a line: `id`,
    `ttft` and `e2e` in seconds, optional `client_output_tokens`), checked;
    TraceError with every problem as `name:line: ...`."""
    out: list[dict[str, Any]] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    if text.startswith("\ufeff"):
        text = text[1:]
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        where = f"{name}:{number}"
        try:
            rec = _DECODER.decode(raw)
        except RecursionError:
            problems.append(f"{where}: JSON nested too deeply")
            continue
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: invalid JSON: {exc.msg} at column {exc.colno}")
            continue
        except ValueError as exc:
            problems.append(f"{where}: invalid JSON: {exc}")
            continue
        if not isinstance(rec, dict):
            problems.append(f"{where}: expected an object, got {show(rec)}")
            continue
        bad = [f"unknown field {key!r} (known: {', '.join(MEASURED_KEYS)})"
               for key in rec if key not in MEASURED_KEYS]
        rid = rec.get("id")
        if not isinstance(rid, str) or not rid:
            bad.append(f"id must be a non-empty string, got {show(rid) if 'id' in rec else 'nothing'}")
        elif rid in seen:
            bad.append(f"id {rid!r} was already measured on line {seen[rid]}")
        for key in ("ttft", "e2e"):
            value = rec.get(key)
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not math.isfinite(value) or not 0 <= value <= 1e9):
                bad.append(f"{key} must be a number of seconds from 0 to 1e9, got "
                           f"{show(value) if key in rec else 'nothing'}")
        if not bad and rec["ttft"] > rec["e2e"]:
            bad.append(f"ttft must be at most e2e ({rec['e2e']!r}), got {rec['ttft']!r}")
        if "client_output_tokens" in rec and not _integer(rec["client_output_tokens"]):
            bad.append(f"client_output_tokens must be an integer >= 0, got "
                       f"{show(rec['client_output_tokens'])}")
        if bad:
            problems += [f"{where}: {p}" for p in bad]
            continue
        seen[rid] = number
        out.append(rec)
    if problems:
        raise TraceError(_capped(problems, name))
    return out
