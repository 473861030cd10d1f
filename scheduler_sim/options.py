"""Every option of the simulator: its name, type, default, range and meaning (SPEC §3).

This table is the single source for trace `config` records, command-line
flags (`--block-size` for `block_size`) and the README's option list. Values
are checked here with messages that name the option and the bad value; the
names of policies and queue orders are checked one layer up, where their
registries live.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = ["OptionSpec", "OPTIONS", "Options", "check_value", "DEFAULT_POLICIES"]

DEFAULT_POLICIES = ("continuous",)


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """One option: `kind` is int, float, bool, str or policies; `minimum` bounds numbers."""

    name: str
    kind: str
    default: Any
    help: str
    minimum: float | None = None
    below: float | None = None  # exclusive upper bound for floats
    maximum: float | None = None  # inclusive upper bound for floats
    nullable: bool = False
    exclusive_minimum: bool = False
    choices: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        """The command-line spelling: `--block-size`."""
        return "--" + self.name.replace("_", "-")


OPTIONS: dict[str, OptionSpec] = {
    spec.name: spec
    for spec in (
        OptionSpec("block_size", "int", 16, "token rows per KV block", minimum=1),
        OptionSpec("num_blocks", "int", 2048, "usable KV blocks (capacity)", minimum=1),
        OptionSpec("token_budget", "int", 2048, "tokens per dispatch", minimum=1),
        OptionSpec("max_rows", "int", 256, "requests per dispatch", minimum=1),
        OptionSpec("prefill_chunk", "int", None,
                   "prompt tokens per request per dispatch (default: token_budget)",
                   minimum=1, nullable=True),
        OptionSpec("release_delay", "int", 0,
                   "ticks before a freed block becomes reusable", minimum=0),
        OptionSpec("policy", "policies", list(DEFAULT_POLICIES),
                   "policy name, or a list of names replayed side by side"),
        OptionSpec("order", "str", "fcfs", "waiting-queue order"),
        OptionSpec("seed", "int", 0, "seed of the `random` order", minimum=0),
        OptionSpec("lpm_threshold", "int", 128,
                   "`lpm` falls back to fcfs when more requests than this wait", minimum=0),
        OptionSpec("waiting_timeout", "int", None,
                   "abort a request that waits longer than this many ticks (default: never)",
                   minimum=1, nullable=True),
        OptionSpec("resume_order", "str", "front",
                   "where a preempted request waits again: front of the queue or by arrival",
                   choices=("front", "arrival")),
        OptionSpec("watermark", "float", 0.0,
                   "fraction of blocks kept free for admissions (vllm)", minimum=0.0, below=1.0),
        OptionSpec("full_prompt_gate", "bool", True,
                   "vllm: admit only if blocks for the whole current sequence fit"),
        OptionSpec("victim", "str", None,
                   "vllm preemption victim: lifo, priority, fewest-outputs or most-blocks "
                   "(default: priority under --order priority, else lifo)",
                   nullable=True, choices=("lifo", "priority", "fewest-outputs", "most-blocks")),
        OptionSpec("max_preemptions", "int", None,
                   "vllm: a request preempted this many times is no longer a victim "
                   "(default: unlimited)", minimum=1, nullable=True),
        OptionSpec("schedule_conservativeness", "float", 1.0,
                   "sglang: scales the initial new_token_ratio (0.7)", minimum=0.0,
                   exclusive_minimum=True),
        OptionSpec("batch_window", "int", 8,
                   "dynamic: ticks the oldest request may wait before a partial batch starts",
                   minimum=0),
        OptionSpec("prefix_caching", "bool", False, "share cached prefix blocks (SPEC §8)"),
        OptionSpec("hash_block_size", "int", None,
                   "tokens per trace block hash (default: block_size)", minimum=1, nullable=True),
        OptionSpec("tick_seconds", "float", None, "seconds per tick, with a cost model",
                   minimum=1e-9, nullable=True),
        OptionSpec("cost_model", "str", None,
                   "MODEL/GPU for the roofline cost model, e.g. llama-3-8b/h100-sxm (SPEC §9)",
                   nullable=True),
        OptionSpec("mfu", "float", 400 / 989,
                   "cost model: achieved fraction of peak FLOP/s (default: 400 of 989 TFLOP/s)",
                   minimum=1e-6, maximum=1.0),
        OptionSpec("bandwidth_efficiency", "float", 0.8,
                   "cost model: achieved fraction of HBM bandwidth", minimum=1e-6,
                   maximum=1.0),
        OptionSpec("step_overhead", "float", 0.0005,
                   "cost model: fixed seconds added to every dispatch", minimum=0.0,
                   maximum=3600.0),
    )
}


def _describe(spec: OptionSpec) -> str:
    if spec.kind == "int":
        text = "an integer"
        if spec.minimum is not None:
            text += f" >= {int(spec.minimum)}"
    elif spec.kind == "float":
        text = "a number"
        if spec.minimum is not None and spec.below is not None:
            text += f" in [{spec.minimum}, {spec.below})"
        elif spec.minimum is not None and spec.maximum is not None:
            text += f" in [{spec.minimum:g}, {spec.maximum:g}]"
        elif spec.minimum is not None:
            text += f" {'>' if spec.exclusive_minimum else '>='} {spec.minimum}"
    elif spec.kind == "bool":
        text = "true or false"
    elif spec.kind == "policies":
        text = "a policy name or a non-empty list of policy names"
    elif spec.choices:
        text = "one of " + ", ".join(repr(c) for c in spec.choices)
    else:
        text = "a string"
    if spec.nullable:
        text += " or null"
    return text


def show(value: Any) -> str:
    """How a bad value is quoted back to the user: JSON spelling, short."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:37] + "...")
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_value(name: str, value: Any) -> tuple[Any, str | None]:
    """Validate one option value; return (normalised value, None) or (None, message).

    The message reads `block_size must be an integer >= 1, got 0`.
    """
    spec = OPTIONS[name]
    bad = f"{name} must be {_describe(spec)}, got {show(value)}"
    if value is None:
        return (None, None) if spec.nullable else (None, bad)
    if spec.kind == "int":
        if not _is_int(value) or (spec.minimum is not None and value < spec.minimum):
            return None, bad
        return value, None
    if spec.kind == "float":
        if not (_is_int(value) or isinstance(value, float)) or not math.isfinite(value):
            return None, bad
        value = float(value)
        if spec.minimum is not None:
            if value < spec.minimum or (spec.exclusive_minimum and value == spec.minimum):
                return None, bad
        if spec.below is not None and value >= spec.below:
            return None, bad
        if spec.maximum is not None and value > spec.maximum:
            return None, bad
        return value, None
    if spec.kind == "bool":
        return (value, None) if isinstance(value, bool) else (None, bad)
    if spec.kind == "policies":
        names = [value] if isinstance(value, str) else value
        if (not isinstance(names, list) or not names
                or not all(isinstance(n, str) and n for n in names)):
            return None, bad
        return list(names), None
    if not isinstance(value, str) or not value or (spec.choices and value not in spec.choices):
        return None, bad
    return value, None


@dataclasses.dataclass(frozen=True)
class Options:
    """The resolved options of one run: defaults, then the trace config, then flags."""

    block_size: int = 16
    num_blocks: int = 2048
    token_budget: int = 2048
    max_rows: int = 256
    prefill_chunk: int = 2048
    release_delay: int = 0
    policy: tuple[str, ...] = DEFAULT_POLICIES
    order: str = "fcfs"
    seed: int = 0
    lpm_threshold: int = 128
    waiting_timeout: int | None = None
    resume_order: str = "front"
    watermark: float = 0.0
    full_prompt_gate: bool = True
    victim: str | None = None
    max_preemptions: int | None = None
    schedule_conservativeness: float = 1.0
    batch_window: int = 8
    prefix_caching: bool = False
    hash_block_size: int = 16
    tick_seconds: float | None = None
    cost_model: str | None = None
    mfu: float = 400 / 989
    bandwidth_efficiency: float = 0.8
    step_overhead: float = 0.0005

    @classmethod
    def resolve(cls, *layers: dict[str, Any]) -> "Options":
        """Merge already-validated option dicts, later layers winning; fill derived defaults."""
        merged: dict[str, Any] = {}
        for layer in layers:
            merged.update({k: v for k, v in layer.items()})
        values = {name: spec.default for name, spec in OPTIONS.items()}
        values.update(merged)
        if values["prefill_chunk"] is None:
            values["prefill_chunk"] = values["token_budget"]
        if values["hash_block_size"] is None:
            values["hash_block_size"] = values["block_size"]
        if values["cost_model"] is not None and values["tick_seconds"] is None:
            values["tick_seconds"] = 0.001  # a cost model needs a clock: 1 ms ticks
        values["policy"] = tuple(values["policy"])
        return cls(**values)

    def problems(self) -> list[str]:
        """Combinations of values that cannot work together."""
        out = []
        if self.order == "lpm" and not self.prefix_caching:
            out.append("order 'lpm' needs prefix_caching: true (it sorts by cached prefix)")
        return out

    def as_dict(self) -> dict[str, Any]:
        """The options as a JSON-ready dict, in table order."""
        out = dataclasses.asdict(self)
        out["policy"] = list(self.policy)
        return out

