"""The measured side of a real vLLM run: from its ground-truth document, one
record per completed request (`measured_records`: `id`, `ttft` and `e2e` in
seconds, `client_output_tokens`), and such records read back from a JSONL file
(`parse_measured`), every problem as `file:line: ...`.
"""
from __future__ import annotations

import json
import math
from typing import Any

from ..records.errors import TraceError
from ..records.option_values import show
from .blis_run import ID_PREFIX, Run, integer_in
from .json_document import DECODER, JSONDocument
from .problems import capped

__all__ = ["measured_records", "parse_measured", "MEASURED_KEYS"]

MEASURED_KEYS = ("id", "ttft", "e2e", "client_output_tokens")


def measured_records(text: str, name: str, run: Run) -> list[dict[str, Any]]:
    """The measured side of a run from its ground-truth document: one object per
    request that completed, in the run's order: `id`, `ttft` and `e2e` in seconds
    (as measured by the client, from sending to the first and the last streamed
    event), and `client_output_tokens`. Each entry must name the same request and
    error flag as the run; TraceError with every problem otherwise."""
    _, items = JSONDocument(text, name).read(None)
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
        if entry.get("index") != index or not integer_in(entry.get("index")):
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
        raise TraceError(capped(problems, name))
    return out


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
            rec = DECODER.decode(raw)
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
            got = show(rid) if "id" in rec else "nothing"
            bad.append(f"id must be a non-empty string, got {got}")
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
        if "client_output_tokens" in rec and not integer_in(rec["client_output_tokens"]):
            bad.append(f"client_output_tokens must be an integer >= 0, got "
                       f"{show(rec['client_output_tokens'])}")
        if bad:
            problems += [f"{where}: {p}" for p in bad]
            continue
        seen[rid] = number
        out.append(rec)
    if problems:
        raise TraceError(capped(problems, name))
    return out
