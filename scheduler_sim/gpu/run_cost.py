"""The cost model and the clock a run's options ask for: the calibration they
name (`calibration_for`: a file's, or a shipped one read once per process), the
`CostModel` of their model, GPU and tp with the options that override its
coefficients (`cost_model_for`), and the run's clock with the serving overhead
every request's latencies include (`clock_for`).
"""
from __future__ import annotations

import dataclasses
import functools

from ..records.clock import Clock
from .calibration import Calibration, is_file_spec, resolve_calibration
from .catalogue import cost_specs
from .costmodel import CostModel

__all__ = ["calibration_for", "cost_model_for", "clock_for"]


@functools.lru_cache(maxsize=16)
def _shipped(spec: str | None, gpu_name: str) -> Calibration:
    return resolve_calibration(spec, gpu_name)


def calibration_for(options) -> Calibration:
    """The calibration `options` ask for (calibration.resolve_calibration): a file's,
    read by io/specs.py into `options.calibration_file`; a shipped one, read once per
    process."""
    model, gpu = cost_specs(options)
    if is_file_spec(options.calibration):
        return resolve_calibration(options.calibration, gpu.name, options.calibration_file)
    return _shipped(options.calibration, gpu.name)


def cost_model_for(options) -> CostModel:
    """The cost model of `options` (which name one): its model, GPU and tp, the
    calibration's coefficients, and the options that override them (`mfu` ->
    gemm_efficiency, `bandwidth_efficiency` -> the weight and KV reads,
    `step_overhead`)."""
    model, gpu = cost_specs(options)
    k = calibration_for(options).coefficients
    changes = {}
    if options.mfu is not None:
        changes["gemm_efficiency"] = options.mfu
    if options.bandwidth_efficiency is not None:
        changes["gemm_bandwidth_efficiency"] = options.bandwidth_efficiency
        changes["kv_read_efficiency"] = options.bandwidth_efficiency
    if options.step_overhead is not None:
        changes["step_overhead"] = options.step_overhead
    return CostModel(model, gpu, k.replace(**changes) if changes else k, options.tp)


def clock_for(options) -> Clock:
    """The run's clock (records/clock.py `Clock.of`), with the serving overhead of
    the cost model's calibration (`request_overhead`, in whole clock steps) that
    every request's TTFT and end-to-end latency include."""
    clock = Clock.of(options)
    if not options.has_cost_model:
        return clock
    seconds = calibration_for(options).coefficients.request_overhead
    if not seconds:
        return clock
    return dataclasses.replace(clock, request_overhead=round(seconds / clock.step_seconds))
