"""The resolved options of one run (`Options`): the defaults of the option
table, then a trace's `config` record, then flags, each value already checked
(`option_values.check_value`); the combinations that cannot work together
(`problems`) and the options set that change nothing in the run (`unused`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .frozen import Frozen, record
from .option_table import OPTIONS, parse_slo
from .option_values import show

__all__ = ["Options", "FLEET_OPTIONS", "HOST_OPTIONS", "PRIORITY_OPTIONS",
           "DURATION_OPTIONS"]

# The options of a fleet of engines: shown in outputs only when a fleet runs.
FLEET_OPTIONS = ("replicas", "router", "affinity_slack", "affinity_threshold",
                 "router_signal_delay", "dp_lockstep",
                 "prefill_replicas", "decode_replicas", "kv_link_gbps")
# The options of host memory for KV (issue 25): shown in outputs only when it is on.
HOST_OPTIONS = ("preemption_mode", "host_kv_gib", "host_write", "host_link_gb_per_s",
                "host_copy_latency_us")
# The options of SGLang's priority scheduling: shown in outputs only when it is on
# (order `priority` with the `sglang` policy).
PRIORITY_OPTIONS = ("priority_first", "priority_preemption", "priority_preemption_threshold")
# Options whose values are durations in the trace's time unit.
DURATION_OPTIONS = tuple(name for name, spec in OPTIONS.items() if spec.kind == "duration")

# Every option's default, as `Options.resolve` starts from.
_DEFAULTS = {name: spec.default for name, spec in OPTIONS.items()}


@record  # a frozen dataclass, its methods written once (frozen.py)
class Options(Frozen):
    """The resolved options of one run: defaults, then the trace config, then flags.

    `origin` says where each option that was not left at its default came
    from: `trace` (the config record), `flag`, or `derived` (the KV pool
    sized from the GPU, see `kv_pool.size_pool`). Every default comes from
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
    priority_first: str = OPTIONS["priority_first"].default
    priority_preemption: bool = OPTIONS["priority_preemption"].default
    priority_preemption_threshold: int = OPTIONS["priority_preemption_threshold"].default
    schedule_conservativeness: float = OPTIONS["schedule_conservativeness"].default
    batch_window: float = OPTIONS["batch_window"].default
    prefix_caching: bool = OPTIONS["prefix_caching"].default
    hash_block_size: int | None = OPTIONS["hash_block_size"].default
    replicas: int = OPTIONS["replicas"].default
    router: str = OPTIONS["router"].default
    affinity_slack: int = OPTIONS["affinity_slack"].default
    affinity_threshold: float = OPTIONS["affinity_threshold"].default
    router_signal_delay: float = OPTIONS["router_signal_delay"].default
    dp_lockstep: bool = OPTIONS["dp_lockstep"].default
    prefill_replicas: int = OPTIONS["prefill_replicas"].default
    decode_replicas: int = OPTIONS["decode_replicas"].default
    kv_link_gbps: float = OPTIONS["kv_link_gbps"].default
    preemption_mode: str = OPTIONS["preemption_mode"].default
    host_kv_gib: float = OPTIONS["host_kv_gib"].default
    host_write: str = OPTIONS["host_write"].default
    host_link_gb_per_s: float | None = OPTIONS["host_link_gb_per_s"].default
    host_copy_latency_us: float = OPTIONS["host_copy_latency_us"].default
    time_unit: str = OPTIONS["time_unit"].default
    tick_seconds: float | None = OPTIONS["tick_seconds"].default
    clock_resolution: float | None = OPTIONS["clock_resolution"].default
    rate_scale: float = OPTIONS["rate_scale"].default
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

    @property
    def host(self) -> bool:
        """Whether host memory is modelled (kv/host_memory.py): host_kv_gib above 0,
        or a preemption_mode asked for (its summary says how resumed requests
        were rebuilt)."""
        return self.host_kv_gib > 0 or "preemption_mode" in self.origin

    @property
    def sglang_priority(self) -> bool:
        """Whether an `sglang` run schedules by priority (order `priority`), SGLang's
        enable_priority_scheduling."""
        return self.order == "priority" and "sglang" in self.policy

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
            if self.router_signal_delay:
                out.append("router_signal_delay is not modelled with disaggregated replicas")
            if not self.full_prompt_gate:
                out.append("full_prompt_gate false is not modelled with disaggregated "
                           "replicas (a decode replica takes blocks for the whole prompt "
                           "when it admits a request)")
        elif self.dp_lockstep and self.router_signal_delay:
            out.append("router_signal_delay is not modelled with dp_lockstep (its ranks "
                       "step together: route by the state of the step)")
        if self.preemption_mode == "swap" and not self.host_kv_gib:
            out.append("preemption_mode 'swap' needs host_kv_gib above 0 (the host memory "
                       "a victim's KV is copied to)")
        if self.host_kv_gib and not self.has_cost_model:
            out.append("host_kv_gib needs a cost model (host memory and its link are "
                       f"sized in bytes), got host_kv_gib {show(self.host_kv_gib)}")
        if self.host_kv_gib and self.disagg:
            out.append("host_kv_gib is not modelled with disaggregated replicas")
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
            for name in ("router", "affinity_slack", "affinity_threshold",
                         "router_signal_delay", "dp_lockstep"):
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
        if not self.host_kv_gib:
            for name in ("host_write", "host_link_gb_per_s", "host_copy_latency_us"):
                if name in self.origin:
                    out.append(f"{name} has no effect without host_kv_gib")
        elif (self.preemption_mode != "swap"
              and not (self.prefix_caching and self.host_write == "through")):
            out.append("host_kv_gib holds nothing here: host memory keeps cached blocks "
                       "(prefix_caching with host_write through) or swapped victims "
                       "(preemption_mode swap)")
        if not self.prefix_caching and "hash_block_size" in self.origin:
            out.append("hash_block_size has no effect without prefix_caching: the trace's "
                       "block hashes are not looked up, so no prompt reuses cached blocks")
        if self.sglang_priority and self.disagg and self.priority_preemption:
            out.append("priority_preemption is not modelled on disaggregated replicas: "
                       "they schedule by priority without preempting")
        if not any(":" in name for name in self.policy):  # (a plugin may read anything)
            for name, spec in OPTIONS.items():
                if (spec.policies and name in self.origin
                        and getattr(self, name) != spec.default
                        and not set(spec.policies) & set(self.policy)):
                    readers = _names(spec.policies)
                    out.append(f"{name} has no effect under {_names(self.policy)}: only "
                               f"{readers} read{'s' * (len(spec.policies) == 1)} it")
        if not self.sglang_priority:
            for name in PRIORITY_OPTIONS:
                if name in self.origin and getattr(self, name) != OPTIONS[name].default:
                    out.append(f"{name} has no effect without policy sglang and order "
                               "priority")
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
        """The options as a JSON-ready dict, in table order (an option of a feature the
        run does not use left out: fleets, host memory, SGLang priorities, a load
        scaled 1x)."""
        out = {name: getattr(self, name) for name in OPTIONS
               if (name not in FLEET_OPTIONS or self.fleet)
               and (name not in HOST_OPTIONS or self.host)
               and (name not in PRIORITY_OPTIONS or self.sglang_priority)
               and (name != "rate_scale" or self.rate_scale != 1)
               and (name != "router_signal_delay" or self.router_signal_delay)}
        out["policy"] = list(self.policy)
        if self.slo is not None:
            out["slo"] = dict(self.slo)
        return out


def _names(policies) -> str:
    """Policy names as a note words them: `vllm`, `vllm and sglang`, `a, b and c`."""
    names = list(policies)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
