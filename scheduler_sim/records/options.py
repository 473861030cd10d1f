"""Every option of the simulator: its name, type, default, range and meaning (§3).

This table is the single source for trace `config` records, command-line
flags (`--block-size` for `block_size`) and the README's option list. Values
are checked here with messages that name the option and the bad value; the
names of policies and queue orders are checked one layer up, where their
registries live.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from typing import Any

__all__ = ["OptionSpec", "OPTIONS", "Options", "check_value", "DEFAULT_POLICIES", "SLO_METRICS",
           "parse_slo", "format_slo"]

DEFAULT_POLICIES = ("continuous",)

# Metrics an SLO may bound (vLLM's goodput names); `e2e` is accepted for `e2el`.
SLO_METRICS = ("ttft", "tpot", "e2el")


def parse_slo(value: Any) -> tuple[tuple[str, float], ...] | None:
    """`'ttft=0.2,tpot=0.05'` or `{"ttft": 0.2}` -> (("ttft", 0.2), ("tpot", 0.05)).

    Objectives come back in `SLO_METRICS` order; None when the value is not
    a valid set of objectives.
    """
    if isinstance(value, str):
        pairs = []
        for part in value.split(","):
            name, sep, number = part.strip().partition("=")
            if not sep:
                return None
            try:
                pairs.append((name.strip(), float(number)))
            except ValueError:
                return None
    elif isinstance(value, dict):
        pairs = list(value.items())
    else:
        return None
    out: dict[str, float] = {}
    for name, number in pairs:
        name = "e2el" if name == "e2e" else name
        if (name not in SLO_METRICS or name in out or isinstance(number, bool)
                or not isinstance(number, (int, float)) or not math.isfinite(number)
                or number <= 0):
            return None
        out[name] = number
    if not out:
        return None
    return tuple((name, out[name]) for name in SLO_METRICS if name in out)


def format_slo(slo: tuple[tuple[str, float], ...]) -> str:
    """The objectives as the flag spells them: `ttft=0.2,tpot=0.05`."""
    return ",".join(f"{name}={value:g}" for name, value in slo)


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
    trace_only: bool = False  # a property of the trace file: no command-line flag

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
        OptionSpec("release_delay", "duration", 0,
                   "time before a freed block becomes reusable (trace time unit)", minimum=0),
        OptionSpec("policy", "policies", list(DEFAULT_POLICIES),
                   "policy name, or a list of names replayed side by side"),
        OptionSpec("order", "str", "fcfs", "waiting-queue order"),
        OptionSpec("seed", "int", 0, "seed of the `random` order", minimum=0),
        OptionSpec("lpm_threshold", "int", 128,
                   "`lpm` falls back to fcfs when more requests than this wait", minimum=0),
        OptionSpec("waiting_timeout", "duration", None,
                   "abort a request that waits longer than this (trace time unit; default: never)",
                   minimum=0, exclusive_minimum=True, nullable=True),
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
        OptionSpec("prefill_interval", "int", 1,
                   "vllm: hold prefill until this many executed steps have passed since the "
                   "last step that carried prefill, unless the last step that let prefill "
                   "run left requests waiting (vLLM's prefill_schedule_interval)", minimum=1),
        OptionSpec("admission_latch", "bool", True,
                   "sglang: after a no_token verdict, try no admission until a running "
                   "request leaves (SGLang's batch_is_full); false: try every step"),
        OptionSpec("schedule_conservativeness", "float", 1.0,
                   "sglang: scales the initial new_token_ratio (0.7)", minimum=0.0,
                   exclusive_minimum=True),
        OptionSpec("batch_window", "duration", 8,
                   "dynamic: how long the oldest request may wait before a partial batch "
                   "starts (trace time unit)", minimum=0),
        OptionSpec("prefix_caching", "bool", False, "share cached prefix blocks (§8)"),
        OptionSpec("hash_block_size", "int", None,
                   "tokens per trace block hash (default: block_size)", minimum=1, nullable=True),
        OptionSpec("replicas", "int", 1,
                   "engines serving the trace, each with its own queues, KV pool and prefix "
                   "cache, fed by the router", minimum=1, maximum=1024),
        OptionSpec("router", "str", "round-robin",
                   "how a fleet picks a replica for each arrival: round-robin, least-loaded "
                   "(vLLM's data-parallel score), prefix-affinity or power-of-two",
                   choices=("round-robin", "least-loaded", "prefix-affinity", "power-of-two")),
        OptionSpec("affinity_slack", "int", 16,
                   "prefix-affinity: the replica with the longest cached prefix is taken "
                   "only while it holds at most this many more requests than the least "
                   "loaded one", minimum=0),
        OptionSpec("affinity_threshold", "float", 0.5,
                   "prefix-affinity: a cached prefix counts only when it covers at least "
                   "this fraction of the prompt's full blocks (below, the least loaded "
                   "replica serves)", minimum=0.0, maximum=1.0),
        OptionSpec("dp_lockstep", "bool", False,
                   "data parallelism: the replicas step together, each step as long as the "
                   "slowest rank's, idle ranks running dummy steps"),
        OptionSpec("prefill_replicas", "int", 0,
                   "prefill/decode disaggregation: replicas that only prefill (with "
                   "decode_replicas; 0: off)", minimum=0, maximum=1024),
        OptionSpec("decode_replicas", "int", 0,
                   "prefill/decode disaggregation: replicas that decode requests whose "
                   "prompt KV they copy from a prefill replica (with prefill_replicas; 0: "
                   "off)", minimum=0, maximum=1024),
        OptionSpec("kv_link_gbps", "float", 200.0,
                   "disaggregation: gigabits per second of the link a prompt's KV crosses "
                   "from a prefill to a decode replica (with a cost model)", minimum=0.0,
                   exclusive_minimum=True, maximum=1e9),
        OptionSpec("time_unit", "str", "tick",
                   "unit of every time in the trace: tick, s or ms", choices=("tick", "s", "ms"),
                   trace_only=True),
        OptionSpec("tick_seconds", "float", None,
                   "seconds per tick: a trace tick under a cost model, or one dispatch of a "
                   "trace in s or ms replayed without one (default: 0.001)",
                   minimum=1e-12, maximum=3600.0, nullable=True),
        OptionSpec("clock_resolution", "float", None,
                   "with a cost model, seconds per clock step: each dispatch completes at the "
                   "first step at or after its modelled end (default: 1e-06)", minimum=1e-15,
                   maximum=1.0, nullable=True),
        OptionSpec("max_concurrency", "int", None,
                   "closed-loop clients: at most this many requests in flight, the rest wait "
                   "for a slot (default: open loop)", minimum=1, nullable=True),
        OptionSpec("slo", "slo", None,
                   "service-level objectives for goodput, e.g. ttft=0.2,tpot=0.05,e2el=5 "
                   "(in the results' time unit)", nullable=True),
        OptionSpec("cost_model", "str", None,
                   "MODEL/GPU for the cost model, e.g. llama-3-8b/h100-sxm (§9)",
                   nullable=True),
        OptionSpec("model", "str", None,
                   "the model a cost model prices: a catalogue name (scheduler-sim models) "
                   "or the path of its Hugging Face config.json (with gpu; §9)", nullable=True),
        OptionSpec("gpu", "str", None,
                   "the GPU a cost model prices: a catalogue name (scheduler-sim models) or "
                   "the path of a GPU spec .json (with model; §9)", nullable=True),
        OptionSpec("calibration", "str", None,
                   "cost model: the calibration of its coefficients: a file, a shipped "
                   "GPU's name, or none for the uncalibrated physics (default: the GPU's "
                   "shipped calibration if there is one)", nullable=True),
        OptionSpec("mfu", "float", None,
                   "cost model: fraction of peak FLOP/s the linear layers reach on many "
                   "tokens (default: the calibration's gemm_efficiency)",
                   minimum=1e-6, maximum=1.0, nullable=True),
        OptionSpec("bandwidth_efficiency", "float", None,
                   "cost model: fraction of HBM bandwidth reading weights and KV (default: "
                   "the calibration's)", minimum=1e-6, maximum=1.0, nullable=True),
        OptionSpec("step_overhead", "float", None,
                   "cost model: seconds of CPU added to every dispatch (default: the "
                   "calibration's)", minimum=0.0, maximum=3600.0, nullable=True),
        OptionSpec("gpu_memory_utilization", "float", 0.9,
                   "cost model: fraction of GPU memory for weights, activations and the KV "
                   "pool, which sizes num_blocks when it is not given", minimum=0.0,
                   exclusive_minimum=True, maximum=1.0),
        OptionSpec("tp", "int", 1,
                   "cost model: tensor-parallel GPUs of one NVLink node (1 to 8) sharing "
                   "weights, FLOPs and KV", minimum=1),
        OptionSpec("activation_reserve", "float", 3.05,
                   "cost model: GiB per GPU kept for activations and memory outside the "
                   "weights and the KV pool", minimum=0.0, maximum=1e6),
    )
}


def _describe(spec: OptionSpec) -> str:
    if spec.kind == "int":
        text = "an integer"
        if spec.minimum is not None and spec.maximum is not None:
            text += f" from {int(spec.minimum)} to {int(spec.maximum):,}"
        elif spec.minimum is not None:
            text += f" >= {int(spec.minimum)}"
    elif spec.kind == "float":
        text = "a number"
        if spec.minimum is not None and spec.below is not None:
            text += f" in [{spec.minimum}, {spec.below})"
        elif spec.minimum is not None and spec.maximum is not None:
            text += (f" in {'(' if spec.exclusive_minimum else '['}{spec.minimum:g}, "
                     f"{spec.maximum:g}]")
        elif spec.minimum is not None:
            text += f" {'>' if spec.exclusive_minimum else '>='} {spec.minimum}"
    elif spec.kind == "duration":
        text = "a number"
        if spec.minimum is not None:
            text += f" {'>' if spec.exclusive_minimum else '>='} {spec.minimum:g}"
        text += " and <= 1e15"
    elif spec.kind == "slo":
        text = ("objectives like 'ttft=0.2,tpot=0.05' (metrics " + ", ".join(SLO_METRICS)
                + ", each a number > 0)")
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
    if _is_int(value) and value.bit_length() > 200:  # its leading digits, whatever its size
        magnitude = abs(value)
        lead = str(magnitude // 10 ** max(0, int(magnitude.bit_length() * 0.30103) - 45))
        return ("-" + lead)[value >= 0:][:37] + "..."
    try:
        text = repr(value)
        if isinstance(value, (dict, list)):
            text = json.dumps(value, separators=(", ", ": "))
    except (TypeError, ValueError):
        pass
    except RecursionError:
        text = "an array" if isinstance(value, list) else "an object"
        text += " nested too deeply to show"
    return text if len(text) <= 40 else text[:37] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    """An int or a float that is a finite float (an int beyond 1.8e308 is not)."""
    if _is_int(value):
        return -sys.float_info.max <= value <= sys.float_info.max
    return isinstance(value, float) and math.isfinite(value)


def check_value(name: str, value: Any) -> tuple[Any, str | None]:
    """Validate one option value; return (normalised value, None) or (None, message).

    The message reads `block_size must be an integer >= 1, got 0`.
    """
    spec = OPTIONS[name]
    bad = f"{name} must be {_describe(spec)}, got {show(value)}"
    if value is None:
        return (None, None) if spec.nullable else (None, bad)
    if spec.kind == "int":
        if (not _is_int(value) or (spec.minimum is not None and value < spec.minimum)
                or (spec.maximum is not None and value > spec.maximum)):
            return None, bad
        return value, None
    if spec.kind == "float":
        if not _finite(value):
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
    if spec.kind == "duration":
        if not _finite(value):
            return None, bad
        if (value < spec.minimum or (spec.exclusive_minimum and value == spec.minimum)
                or value > 1e15):
            return None, bad
        return (int(value) if float(value).is_integer() else value), None
    if spec.kind == "slo":
        parsed = parse_slo(value)
        return (parsed, None) if parsed is not None else (None, bad)
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


# Options whose values are durations in the trace's time unit.
# The options of a fleet of engines: shown in outputs only when a fleet runs.
FLEET_OPTIONS = ("replicas", "router", "affinity_slack", "affinity_threshold", "dp_lockstep",
                 "prefill_replicas", "decode_replicas", "kv_link_gbps")
DURATION_OPTIONS = tuple(name for name, spec in OPTIONS.items() if spec.kind == "duration")


# Every option's default, as `Options.resolve` starts from.
_DEFAULTS = {name: spec.default for name, spec in OPTIONS.items()}


@dataclasses.dataclass(frozen=True)
class Options:
    """The resolved options of one run: defaults, then the trace config, then flags.

    `origin` says where each option that was not left at its default came
    from: `trace` (the config record), `flag`, or `derived` (the KV pool
    sized from the GPU, see `costmodel.size_pool`). Every default comes from
    `OPTIONS`; `prefill_chunk` and `hash_block_size` default to
    `token_budget` and `block_size`.
    """

    block_size: int = OPTIONS["block_size"].default
    num_blocks: int = OPTIONS["num_blocks"].default
    token_budget: int = OPTIONS["token_budget"].default
    max_rows: int = OPTIONS["max_rows"].default
    prefill_chunk: int | None = OPTIONS["prefill_chunk"].default
    release_delay: float = OPTIONS["release_delay"].default
    policy: tuple[str, ...] = tuple(OPTIONS["policy"].default)
    order: str = OPTIONS["order"].default
    seed: int = OPTIONS["seed"].default
    lpm_threshold: int = OPTIONS["lpm_threshold"].default
    waiting_timeout: float | None = OPTIONS["waiting_timeout"].default
    resume_order: str = OPTIONS["resume_order"].default
    watermark: float = OPTIONS["watermark"].default
    full_prompt_gate: bool = OPTIONS["full_prompt_gate"].default
    victim: str | None = OPTIONS["victim"].default
    max_preemptions: int | None = OPTIONS["max_preemptions"].default
    prefill_interval: int = OPTIONS["prefill_interval"].default
    admission_latch: bool = OPTIONS["admission_latch"].default
    schedule_conservativeness: float = OPTIONS["schedule_conservativeness"].default
    batch_window: float = OPTIONS["batch_window"].default
    prefix_caching: bool = OPTIONS["prefix_caching"].default
    hash_block_size: int | None = OPTIONS["hash_block_size"].default
    replicas: int = OPTIONS["replicas"].default
    router: str = OPTIONS["router"].default
    affinity_slack: int = OPTIONS["affinity_slack"].default
    affinity_threshold: float = OPTIONS["affinity_threshold"].default
    dp_lockstep: bool = OPTIONS["dp_lockstep"].default
    prefill_replicas: int = OPTIONS["prefill_replicas"].default
    decode_replicas: int = OPTIONS["decode_replicas"].default
    kv_link_gbps: float = OPTIONS["kv_link_gbps"].default
    time_unit: str = OPTIONS["time_unit"].default
    tick_seconds: float | None = OPTIONS["tick_seconds"].default
    clock_resolution: float | None = OPTIONS["clock_resolution"].default
    max_concurrency: int | None = OPTIONS["max_concurrency"].default
    slo: tuple[tuple[str, float], ...] | None = OPTIONS["slo"].default
    cost_model: str | None = OPTIONS["cost_model"].default
    model: str | None = OPTIONS["model"].default
    gpu: str | None = OPTIONS["gpu"].default
    calibration: str | None = OPTIONS["calibration"].default
    mfu: float | None = OPTIONS["mfu"].default
    bandwidth_efficiency: float | None = OPTIONS["bandwidth_efficiency"].default
    step_overhead: float | None = OPTIONS["step_overhead"].default
    gpu_memory_utilization: float = OPTIONS["gpu_memory_utilization"].default
    tp: int = OPTIONS["tp"].default
    activation_reserve: float = OPTIONS["activation_reserve"].default
    origin: dict[str, str] = dataclasses.field(default_factory=dict, compare=False,
                                               repr=False)
    # The folder a relative `FILE.py:CLASS` policy is loaded from (None: the working
    # directory): the trace's own folder when its config named the plugin.
    plugin_dir: str | None = dataclasses.field(default=None, compare=False, repr=False)
    # The folder of the trace whose config these options were resolved over: a relative
    # `model` or `gpu` path that the config gave is read from there (io/specs.py).
    trace_dir: str | None = dataclasses.field(default=None, compare=False, repr=False)
    # The (ModelSpec, GpuSpec) the cost model prices, once io/specs.py has read them
    # (gpu/catalogue.cost_specs); None until then, and without a cost model.
    cost_specs: Any = dataclasses.field(default=None, compare=False, repr=False)
    # The calibration file `calibration` names, read by io/specs.py (load_specs); None
    # until then, and when it names no file.
    calibration_file: Any = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.prefill_chunk is None:
            object.__setattr__(self, "prefill_chunk", self.token_budget)
        if self.hash_block_size is None:
            object.__setattr__(self, "hash_block_size", self.block_size)

    @classmethod
    def resolve(cls, *layers: dict[str, Any],
                sources: tuple[str, ...] = ("trace", "flag")) -> "Options":
        """Merge already-validated option dicts, later layers winning; fill derived defaults.

        Layer i is named `sources[i]` in `origin` (`given` past the names).
        """
        values = dict(_DEFAULTS)
        origin: dict[str, str] = {}
        for i, layer in enumerate(layers):
            values.update(layer)
            origin.update(dict.fromkeys(layer, sources[i] if i < len(sources) else "given"))
        values["policy"] = tuple(values["policy"])
        if isinstance(values["slo"], (str, dict)):
            values["slo"] = parse_slo(values["slo"])
        return cls(**values, origin=origin)

    @property
    def has_cost_model(self) -> bool:
        """Whether dispatches are priced in seconds: `cost_model`, or `model` and `gpu`."""
        return self.cost_model is not None or self.model is not None or self.gpu is not None

    @property
    def fleet(self) -> bool:
        """Whether the trace is served by more than one engine (fleet/)."""
        return self.replicas > 1 or self.disagg

    @property
    def disagg(self) -> bool:
        """Whether prefill and decode run on separate replicas (fleet/disagg.py)."""
        return self.prefill_replicas > 0 or self.decode_replicas > 0

    def problems(self) -> list[str]:
        """Combinations of values that cannot work together."""
        out = []
        if self.fleet and self.max_concurrency is not None:
            out.append("max_concurrency (closed-loop clients) is not modelled across "
                       + (f"replicas: use replicas 1, got replicas {self.replicas}"
                          if not self.disagg else "disaggregated replicas"))
        if self.disagg:
            if not (self.prefill_replicas and self.decode_replicas):
                out.append("prefill_replicas and decode_replicas are both >= 1 or both 0, "
                           f"got {self.prefill_replicas} and {self.decode_replicas}")
            if self.replicas != 1:
                out.append("replicas must stay 1 with prefill_replicas and decode_replicas "
                           f"(they size the fleet), got replicas {self.replicas}")
            if self.dp_lockstep:
                out.append("dp_lockstep is not modelled with disaggregated replicas")
            if not self.full_prompt_gate:
                out.append("full_prompt_gate false is not modelled with disaggregated "
                           "replicas (a decode replica takes blocks for the whole prompt "
                           "when it admits a request)")
        if self.order == "lpm" and not self.prefix_caching:
            out.append("order 'lpm' needs prefix_caching: true (it sorts by cached prefix)")
        if self.time_unit == "tick":
            for name in DURATION_OPTIONS:
                value = getattr(self, name)
                if value is not None and not float(value).is_integer():
                    out.append(f"{name} must be a whole number of ticks (the trace's "
                               f"time_unit is tick), got {show(value)}")
        return out

    def unused(self) -> list[str]:
        """Options set away from their default that change nothing in this run, or that
        mean something other than a reader might think, and why."""
        out = []
        real = self.time_unit != "tick"
        if not self.fleet:
            for name in ("router", "affinity_slack", "affinity_threshold", "dp_lockstep"):
                if name in self.origin and getattr(self, name) != OPTIONS[name].default:
                    out.append(f"{name} has no effect with one replica (set replicas)")
        elif self.router == "prefix-affinity" and not self.prefix_caching:
            out.append("router prefix-affinity without prefix_caching routes by load alone "
                       "(no replica caches a prefix)")
        if not self.disagg:
            if "kv_link_gbps" in self.origin:
                out.append("kv_link_gbps has no effect without prefill_replicas and "
                           "decode_replicas")
        elif not self.has_cost_model and "kv_link_gbps" in self.origin:
            out.append("kv_link_gbps has no effect without a cost model (a transfer lasts "
                       "one tick)")
        if not self.has_cost_model and self.slo is not None:
            out.append("the slo objectives are in ticks: without a cost model every result "
                       "is")
        if not self.has_cost_model:
            if self.tick_seconds is not None and not real:
                out.append("tick_seconds has no effect: without a cost model a tick trace "
                           "is replayed in ticks")
            if self.clock_resolution is not None:
                out.append("clock_resolution has no effect without a cost model (a dispatch "
                           "is one tick)")
            for name in ("gpu_memory_utilization", "tp", "activation_reserve", "calibration",
                         "mfu", "bandwidth_efficiency", "step_overhead"):
                if name in self.origin:
                    out.append(f"{name} has no effect without a cost model")
        elif self.tick_seconds is not None and real:
            out.append(f"tick_seconds has no effect: the trace's times are in "
                       f"{self.time_unit}, and with a cost model the clock steps by "
                       "clock_resolution")
        return out

    def as_dict(self) -> dict[str, Any]:
        """The options as a JSON-ready dict, in table order."""
        out = {name: getattr(self, name) for name in OPTIONS
               if name not in FLEET_OPTIONS or self.fleet}
        out["policy"] = list(self.policy)
        if self.slo is not None:
            out["slo"] = dict(self.slo)
        return out
