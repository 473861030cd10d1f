"""Reading the files a cost model may be given: a model's config.json, a GPU's spec .json,
a calibration.

`load_specs` turns the options' `cost_model`, `model` and `gpu` into the
(ModelSpec, GpuSpec) a run prices and keeps them in `Options.cost_specs`,
reading a file when `model` or `gpu` names one. A path that a trace's config
gave is taken from the trace's folder (`Options.trace_dir`), as a plugin
file is; one given by a flag, from the working directory. Reading a
config.json is reading data, never code: JSON only, at most 1 MiB, every
problem of the file listed (ConfigError, exit 2).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from ..gpu.calibration import MAX_BYTES as MAX_CALIBRATION_BYTES
from ..gpu.calibration import Calibration, is_file_spec, parse_calibration
from ..gpu.catalogue import agree, gpu_named, is_path, model_named, parse_cost_model
from ..gpu.gpus import GpuSpec
from ..gpu.models import ModelSpec
from ..records.errors import ConfigError, UsageError
from ..records.options import Options
from .inputs import read_limited

__all__ = ["load_specs", "read_model_file", "read_gpu_file", "spec_path", "spec_inputs",
           "model_spec", "gpu_spec", "MAX_SPEC_BYTES", "calibration_path",
           "read_calibration_file"]

# A config.json is a few KiB (Llama-4's, with its quantisation's ignore list, 28 KiB).
MAX_SPEC_BYTES = 2 ** 20


def spec_path(options: Options, key: str) -> str | None:
    """The file `options.model` or `options.gpu` (`key`) names, as it is opened: relative
    to the trace's folder when the trace's config gave it; None for a catalogue name."""
    value = getattr(options, key)
    if value is None or not is_path(value):
        return None
    if (options.origin.get(key) == "trace" and options.trace_dir is not None
            and not os.path.isabs(value)):
        return os.path.join(options.trace_dir, value)
    return value


def spec_inputs(options: Options) -> list[tuple[str, str]]:
    """The spec files the options read, as (option, path) inputs for
    `output_paths.check_output_paths` (no output may be written over one)."""
    found = [(f"--{key}", path) for key in ("model", "gpu")
             if (path := spec_path(options, key)) is not None]
    calibration = calibration_path(options)
    if calibration is not None:
        found.append(("--calibration", calibration))
    return found


def load_specs(options: Options, cache: dict[tuple[str, str], Any] | None = None
               ) -> Options:
    """`options` with `cost_specs` set to the (model, GPU) they price (unchanged without
    a cost model, or when already set). Files are read through `cache` when given (a
    sweep reads each once). UsageError for an unknown name, an unreadable file or a
    `cost_model` that disagrees with `model`/`gpu`; ConfigError for a bad file."""
    if options.cost_specs is not None or not options.has_cost_model or options.problems():
        return options  # the caller reports the problems
    model = gpu = None
    if options.cost_model is not None:
        try:
            model, gpu = parse_cost_model(options.cost_model)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    named_model = named_gpu = None
    if options.model is not None:
        path = spec_path(options, "model")
        named_model = (model_named(options.model) if path is None
                       else _cached(cache, "model", path, read_model_file))
    if options.gpu is not None:
        path = spec_path(options, "gpu")
        named_gpu = (gpu_named(options.gpu) if path is None
                     else _cached(cache, "gpu", path, read_gpu_file))
    specs = agree(options, model, gpu, named_model, named_gpu)
    calibration = None
    path = calibration_path(options)
    if path is not None:
        calibration = _cached(cache, "calibration", path, read_calibration_file)
    return dataclasses.replace(options, cost_specs=specs, calibration_file=calibration)


def calibration_path(options: Options) -> str | None:
    """The file `options.calibration` names, as it is opened (relative to the trace's
    folder when the trace's config gave it); None when it names no file."""
    value = options.calibration
    if not is_file_spec(value):
        return None
    if (options.origin.get("calibration") == "trace" and options.trace_dir is not None
            and not os.path.isabs(value)):
        return os.path.join(options.trace_dir, value)
    return value


def read_calibration_file(path: str) -> Calibration:
    """The calibration in file `path` (gpu/calibration.py's format); UsageError listing
    every problem."""
    data = read_limited(path, MAX_CALIBRATION_BYTES, "which no calibration file is")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: invalid UTF-8 at byte {exc.start + 1}") from None
    return dataclasses.replace(parse_calibration(text, path), path=path)


def model_spec(text: str) -> ModelSpec:
    """A catalogue model by name, or the config.json at path `text`."""
    return read_model_file(text) if is_path(text) else model_named(text)


def gpu_spec(text: str) -> GpuSpec:
    """A catalogue GPU by name, or the spec .json at path `text`."""
    return read_gpu_file(text) if is_path(text) else gpu_named(text)


def _cached(cache: dict | None, kind: str, path: str, read) -> Any:
    if cache is None:
        return read(path)
    key = (kind, path)
    if key not in cache:
        cache[key] = read(path)
    return cache[key]


def read_model_file(path: str) -> ModelSpec:
    """The model a config.json describes, named after its folder (`MODEL/config.json`)
    or its file; ConfigError listing every problem of the file."""
    base = os.path.basename(path)
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    name = folder if base == "config.json" and folder else os.path.splitext(base)[0]
    return ModelSpec.from_config(_json_file(path, "which no config.json is"), name, path)


def read_gpu_file(path: str) -> GpuSpec:
    """The GPU a spec .json describes (name: its `name`, else the file's); ConfigError
    listing every problem of the file."""
    name = os.path.splitext(os.path.basename(path))[0]
    return GpuSpec.from_json(_json_file(path, "which no GPU spec file is"), path, name)


def _json_file(path: str, why: str) -> Any:
    data = read_limited(path, MAX_SPEC_BYTES, why)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path}: invalid UTF-8 at byte {exc.start + 1}, got "
                           f"{data[exc.start:exc.start + 1]!r}"]) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError([f"{path}:{exc.lineno}: invalid JSON: {exc.msg} at column "
                           f"{exc.colno}"]) from None
    except RecursionError:
        raise ConfigError([f"{path}: invalid JSON: nested too deeply"]) from None
    except ValueError as exc:  # a number too long to convert, say
        raise ConfigError([f"{path}: invalid JSON: {exc}"]) from None
