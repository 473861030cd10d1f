"""Every option of the simulator: its name, type, default, range and meaning (§3).

This table is the single source for trace `config` records, command-line
flags (`--block-size` for `block_size`) and the README's option list. How a
value is checked against it is `option_values`'; the resolved options of one
run are `options.Options`. The names of policies and queue orders are checked
one layer up, where their registries live.
"""
from __future__ import annotations

import math
from typing import Any

from .frozen import Frozen, record

__all__ = ["OptionSpec", "OPTIONS", "DEFAULT_POLICIES", "SLO_METRICS", "parse_slo",
           "format_slo"]

DEFAULT_POLICIES = ("continuous",)

# The fixed cost of one GPU-host copy, on top of its bytes' time (see README,
# "Host memory"): the order of a copy's launch and synchronisation.
HOST_COPY_LATENCY_US = 10.0

# The largest block size (2**16 token rows): a larger block holds any prompt whole.
MAX_BLOCK_SIZE = 65536

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


# A frozen dataclass, its methods written once (frozen.py); its __init__ not compact:
# made 60 times at import, it sets each field by a statement (frozen.make_inits).
@record(compact=False)
class OptionSpec(Frozen):
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
    # The built-in policies that read it, if only some do: set under none of them (and
    # no plugin), it changes nothing, and the run's notes say so (`Options.unused`).
    policies: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        """The command-line spelling: `--block-size`."""
        return "--" + self.name.replace("_", "-")


OPTIONS: dict[str, OptionSpec] = {
    spec.name: spec
    for spec in (
        # (Bounded: the decode cohort keeps a group per row of a block,
        # engine/fast/cohort.py, made up front.)
        OptionSpec("block_size", "int", 16, "token rows per KV block", minimum=1,
                   maximum=MAX_BLOCK_SIZE),
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
                   "`lpm` stops sorting (the list keeps its order) when more requests "
                   "than this wait", minimum=0),
        OptionSpec("waiting_timeout", "duration", None,
                   "abort a request that waits longer than this (trace time unit; default: never)",
                   minimum=0, exclusive_minimum=True, nullable=True),
        OptionSpec("resume_order", "str", "front",
                   "where a preempted request waits again: front of the queue or by arrival",
                   choices=("front", "arrival")),
        OptionSpec("watermark", "float", 0.0,
                   "fraction of blocks kept free for admissions (vllm)", minimum=0.0, below=1.0,
                   policies=("vllm",)),
        OptionSpec("full_prompt_gate", "bool", True,
                   "vllm: admit only if blocks for the whole current sequence fit",
                   policies=("vllm",)),
        OptionSpec("victim", "str", None,
                   "vllm preemption victim: lifo, priority, fewest-outputs, most-blocks or "
                   "most-reclaimable "
                   "(default: priority under --order priority, else lifo)",
                   nullable=True, policies=("vllm",),
                   choices=("lifo", "priority", "fewest-outputs", "most-blocks", "most-reclaimable")),
        OptionSpec("max_preemptions", "int", None,
                   "vllm: a request preempted this many times is no longer a victim "
                   "(default: unlimited)", minimum=1, nullable=True, policies=("vllm",)),
        OptionSpec("prefill_interval", "int", 1,
                   "vllm: hold prefill until this many executed steps have passed since the "
                   "last step that carried prefill, unless the last step that let prefill "
                   "run left requests waiting (vLLM's prefill_schedule_interval)", minimum=1,
                   policies=("vllm",)),
        OptionSpec("admission_latch", "bool", True,
                   "sglang: after a no_token verdict, try no admission until a running "
                   "request leaves (SGLang's batch_is_full); false: try every step",
                   policies=("sglang",)),
        OptionSpec("priority_first", "str", "low",
                   "sglang under order priority: which priority values go first, low (the "
                   "trace format's meaning) or high (SGLang's default)",
                   choices=("low", "high")),
        OptionSpec("priority_preemption", "bool", True,
                   "sglang under order priority: when the rows are full, a waiting request "
                   "preempts running ones it beats by more than priority_preemption_threshold "
                   "(SGLang's priority preemption); false: no such preemption"),
        OptionSpec("priority_preemption_threshold", "int", 10,
                   "sglang under order priority: how much more important a waiting request "
                   "must be than a running one to preempt it (strictly more than this)",
                   minimum=0),
        OptionSpec("schedule_conservativeness", "float", 1.0,
                   "sglang: scales the initial new_token_ratio (0.7)", minimum=0.0,
                   exclusive_minimum=True, policies=("sglang",)),
        OptionSpec("batch_window", "duration", 8,
                   "dynamic: how long the oldest request may wait before a partial batch "
                   "starts (trace time unit)", minimum=0, policies=("dynamic",)),
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
        OptionSpec("router_signal_delay", "duration", 0,
                   "how old the replicas' state is that the router reads (queues, KV usage, "
                   "cached prefixes; trace time unit): each request is routed by the "
                   "replicas as they were that long before it arrives", minimum=0),
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
        OptionSpec("preemption_mode", "str", "recompute",
                   "what a preemption does with the victim's KV: recompute (dropped, "
                   "rebuilt on resume) or swap (copied to host memory and back; needs "
                   "host_kv_gib)", choices=("recompute", "swap")),
        OptionSpec("host_kv_gib", "float", 0.0,
                   "GiB of host memory per replica for KV: cached blocks written through "
                   "from the GPU (with prefix_caching) and swapped victims (0: none; "
                   "with a cost model)", minimum=0.0, maximum=1e6),
        OptionSpec("host_write", "str", "through",
                   "which GPU blocks are copied to host memory: through (every full "
                   "block that gets a prefix-cache key: a prompt's when its dispatch "
                   "ends, those holding outputs when their request ends or is preempted) "
                   "or off (host memory holds swapped victims only)",
                   choices=("through", "off")),
        OptionSpec("host_link_gb_per_s", "float", None,
                   "gigabytes per second of the GPU-host link, each way (default: the "
                   "GPU's host link, e.g. 64 for PCIe Gen5 x16)", minimum=0.0,
                   exclusive_minimum=True, maximum=1e6, nullable=True),
        OptionSpec("host_copy_latency_us", "float", HOST_COPY_LATENCY_US,
                   "microseconds every GPU-host copy adds to its bytes' time",
                   minimum=0.0, maximum=1e6),
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
        OptionSpec("rate_scale", "float", 1.0,
                   "replay the trace's load this many times over: every arrival (and "
                   "cancellation, forced preemption, deadline) at its time divided by this, "
                   "order kept (2: twice the request rate)", minimum=1e-6,
                   maximum=1e6),
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
