"""Which model and GPU a run prices: the catalogues by name, and the choice the options make.

The model catalogue is the config.json of each model, shipped unchanged in
`gpu/data/models/NAME.json` (their sources in `SOURCES.md` beside them) and
read when a name is first asked for. `llama-3-8b` and `llama-3-70b`, the
names of the first catalogue, are aliases of the Llama-3.1 configs (the same
architecture).

The options choose with `cost_model` (`MODEL/GPU`, catalogue names) or with
`model` and `gpu`, each a catalogue name or a path to a file (a config.json,
a GPU spec .json). Files are read one layer up (io/specs.py), which keeps
what it read in `Options.cost_specs`; here a path without it is a mistake
of the caller.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from importlib import resources

from ..records.errors import UsageError
from ..records.spelling import closest, did_you_mean
from .gpus import GPUS, GpuSpec
from .models import ModelSpec

__all__ = ["MODELS", "CATALOGUE", "ALIASES", "GPUS", "model_named", "gpu_named",
           "parse_cost_model", "cost_specs", "is_path", "known_models"]

# Catalogue name -> the Hugging Face repository whose config.json it ships.
CATALOGUE = {
    "llama-2-7b": "meta-llama/Llama-2-7b-hf",
    "llama-2-70b": "meta-llama/Llama-2-70b-hf",
    "codellama-34b": "codellama/CodeLlama-34b-Instruct-hf",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "mistral-nemo-12b": "mistralai/Mistral-Nemo-Instruct-2407",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
    "qwen3-14b": "Qwen/Qwen3-14B",
    "yi-34b": "01-ai/Yi-34B",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "deepseek-v2-lite": "deepseek-ai/DeepSeek-V2-Lite",
    "llama-4-scout-17b-16e-fp8": "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic",
    "glm-5.2-fp8": "a GLM-5-architecture FP8 checkpoint (inference-sim's glm-5.2-fp8)",
}
# Today's names of the first catalogue: Llama-3-8B and -70B have Llama-3.1's architecture.
ALIASES = {"llama-3-8b": "llama-3.1-8b", "llama-3-70b": "llama-3.1-70b"}


class _Catalogue(Mapping[str, ModelSpec]):
    """The shipped models by name (aliases too), each parsed from its file when first
    asked for and kept."""

    def __init__(self) -> None:
        self._specs: dict[str, ModelSpec] = {}

    def __getitem__(self, name: str) -> ModelSpec:
        spec = self._specs.get(name)
        if spec is None:
            file = ALIASES.get(name, name)
            if file not in CATALOGUE:
                raise KeyError(name)
            data = resources.files(__package__).joinpath("data", "models", f"{file}.json")
            where = f"scheduler_sim/gpu/data/models/{file}.json"
            spec = ModelSpec.from_config(json.loads(data.read_bytes()), name, where)
            self._specs[name] = spec
        return spec

    def __contains__(self, name: object) -> bool:  # without reading the file
        return name in CATALOGUE or name in ALIASES

    def __iter__(self) -> Iterator[str]:
        return iter((*CATALOGUE, *ALIASES))

    def __len__(self) -> int:
        return len(CATALOGUE) + len(ALIASES)


MODELS: Mapping[str, ModelSpec] = _Catalogue()


def known_models() -> str:
    """The catalogue's names as messages list them."""
    return ", ".join(MODELS)


def is_path(text: str) -> bool:
    """Whether a `model` or `gpu` value names a file rather than a catalogue entry: it
    ends in .json or holds a path separator."""
    return text.endswith(".json") or "/" in text or "\\" in text


def model_named(name: str) -> ModelSpec:
    """The catalogue's model `name`; UsageError naming the known ones."""
    if name not in MODELS:
        raise UsageError(f"unknown model {name!r}{did_you_mean(name, MODELS)} (known: "
                         f"{known_models()}; or a path to a config.json)")
    return MODELS[name]


def gpu_named(name: str) -> GpuSpec:
    """The catalogue's GPU `name`; UsageError naming the known ones."""
    if name not in GPUS:
        raise UsageError(f"unknown gpu {name!r}{did_you_mean(name, GPUS)} (known: "
                         f"{', '.join(GPUS)}; or a path to a GPU spec .json)")
    return GPUS[name]


def parse_cost_model(text: str) -> tuple[ModelSpec, GpuSpec]:
    """`llama-3-8b/h100-sxm` -> (model, gpu); ValueError naming the known ones."""
    model_name, _, gpu_name = text.partition("/")
    if model_name not in MODELS or gpu_name not in GPUS:
        model = model_name if model_name in MODELS else closest(model_name, MODELS)
        gpu = gpu_name if gpu_name in GPUS else closest(gpu_name, GPUS)
        hint = f" (did you mean '{model}/{gpu}'?)" if model and gpu else ""
        raise ValueError(
            f"cost_model must be MODEL/GPU with MODEL in {known_models()} and GPU in "
            f"{', '.join(GPUS)}, got {text!r}{hint}")
    return MODELS[model_name], GPUS[gpu_name]


def cost_specs(options) -> tuple[ModelSpec, GpuSpec] | None:
    """The (model, GPU) an `Options` prices, or None without a cost model.

    The specs read by io/specs.py (`options.cost_specs`) when it ran; else the
    catalogue's, from `cost_model` and from `model` and `gpu` (which win). A
    file named by `model` or `gpu` that was not read, or a `cost_model` that
    disagrees with them, is a UsageError.
    """
    if options.cost_specs is not None:
        return options.cost_specs
    if not options.has_cost_model:
        return None
    model = gpu = None
    if options.cost_model is not None:
        model, gpu = parse_cost_model(options.cost_model)
    for key in ("model", "gpu"):
        value = getattr(options, key)
        if value is not None and is_path(value):
            raise UsageError(f"{key} {value!r} is a file: read it with "
                             "scheduler_sim.io.specs.load_specs before the run")
    named_model = model_named(options.model) if options.model is not None else None
    named_gpu = gpu_named(options.gpu) if options.gpu is not None else None
    return agree(options, model, gpu, named_model, named_gpu)


def agree(options, model: ModelSpec | None, gpu: GpuSpec | None,
          named_model: ModelSpec | None, named_gpu: GpuSpec | None
          ) -> tuple[ModelSpec, GpuSpec]:
    """The specs `cost_model` (model, gpu) and `model`/`gpu` (named_*) give together;
    UsageError when they disagree or one of the two is missing."""
    if model is not None and named_model is not None and not _same_model(model, named_model):
        raise UsageError(f"cost_model {options.cost_model} and model {options.model} name "
                         "different models: give one of them")
    if gpu is not None and named_gpu is not None and gpu != named_gpu:
        raise UsageError(f"cost_model {options.cost_model} and gpu {options.gpu} name "
                         "different GPUs: give one of them")
    model = named_model or model
    gpu = named_gpu or gpu
    if model is None or gpu is None:
        missing, given = ("model", f"gpu {options.gpu}") if model is None else (
            "gpu", f"model {options.model}")
        raise UsageError(f"a cost model needs a model and a GPU: {given} was given without "
                         f"{missing} (or give both as cost_model MODEL/GPU)")
    return model, gpu


def _same_model(one: ModelSpec, other: ModelSpec) -> bool:
    """The same architecture, whatever each is called and wherever it was read."""
    return (dataclasses.replace(one, name="", source="")
            == dataclasses.replace(other, name="", source=""))
