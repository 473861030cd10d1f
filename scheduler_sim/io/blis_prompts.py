"""Which of the client's prompts each request of a real vLLM run sent
(`assign_prompts`), from inference-perf's round robin over its prompts and the
prompt lengths the run lists: in place, from a neighbouring position (requests
sent a few ms apart can reach the server swapped), unmatched, or filled in for
a request that errored before the client counted its prompt.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import TYPE_CHECKING

from ..records.errors import TraceError
from .inference_perf import ClientConfig
from .problems import capped

if TYPE_CHECKING:  # only named in annotations; blis_run imports this module
    from .blis_run import Run

__all__ = ["Prompts", "assign_prompts", "NEIGHBOURS"]

# Positions either side, nearest first, where a request whose prompt length is not its
# slot's may find its slot: requests scheduled a few ms apart can reach the server
# swapped (every mismatch of the 16 published runs is within 2).
NEIGHBOURS = (1, -1, 2, -2)


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
        raise TraceError(capped(problems, name))
    return out
