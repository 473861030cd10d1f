"""The GPU catalogue: each GPU's peak figures from its datasheet (README "Models and GPUs").

FLOP/s are dense (without sparsity): where a datasheet prints only the
sparse figure (marked *, "with sparsity"), the dense one is half of it,
rounded down to a whole TFLOP/s as the H100 SXM's 989 (the figure the
default `mfu`, 400/989, is built on). Bandwidths are bytes/s in one
direction: a datasheet's NVLink and PCIe figures are both directions
together, so they are halved. Memory is what the CUDA runtime reports
(PyTorch's "total capacity"), a little under the nominal size: the figures
and where each was seen are in `source`.

`GpuSpec.from_json` reads a GPU that is not listed (`--gpu FILE.json`): an
object with every field of `GpuSpec` but `source` (optional) and `name`
(default: the file's name).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..records.errors import ConfigError
from ..records.frozen import Frozen, record
from ..records.option_values import show

__all__ = ["GpuSpec", "GPUS", "INTERCONNECTS"]

INTERCONNECTS = ("nvlink", "pcie")

A100_SHEET = ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
              "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")
H100_SHEET = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
H200_SHEET = "https://www.nvidia.com/en-us/data-center/h200/"
L40S_SHEET = "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"
B200_SHEET = "https://www.nvidia.com/en-us/data-center/hgx/"


@record  # a frozen dataclass, its methods written once (records/frozen.py)
class GpuSpec(Frozen):
    """A GPU's peak figures: dense bf16 and fp8 FLOP/s (fp8 None without FP8 tensor
    cores), HBM bandwidth, memory as the CUDA runtime reports it, the host link and the
    GPU-to-GPU link (bytes/s, one direction), and where every figure comes from."""

    name: str
    bf16_flops: float
    fp8_flops: float | None
    hbm_bandwidth: float
    memory_gib: float
    host_link: float
    interconnect: float
    interconnect_kind: str  # "nvlink" or "pcie"
    source: str = ""

    @property
    def peak_flops(self) -> float:
        """The dense bf16 peak (what the cost model has always called peak)."""
        return self.bf16_flops

    @classmethod
    def from_json(cls, data: Any, where: str, name: str | None = None) -> "GpuSpec":
        """The GPU a spec file's parsed JSON describes; ConfigError listing every problem
        as `WHERE: field 'K': what is wrong, got what`. `name` is the default name."""
        if not isinstance(data, dict):
            raise ConfigError([f"{where}: a GPU spec file holds a JSON object, got "
                               f"{show(data)}"])
        problems = []
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            key = field.name
            value = data.get(key)
            rule = _RULES[key]
            if key not in data:
                if key == "name" and name:
                    values[key] = name
                elif key in ("source", "fp8_flops"):
                    values[key] = "" if key == "source" else None
                else:
                    problems.append(f"{where}: field '{key}': missing ({rule[0]} is required)")
                continue
            if not rule[1](value):
                problems.append(f"{where}: field '{key}': must be {rule[0]}, got {show(value)}")
                continue
            values[key] = float(value) if isinstance(value, int) and key != "name" else value
        for key in data:
            if key not in _RULES:
                problems.append(f"{where}: field '{key}': not a GPU spec field (known: "
                                f"{', '.join(_RULES)}), got {show(data[key])}")
        if problems:
            raise ConfigError(problems)
        values["source"] = values["source"] or where
        return cls(**values)


def _number(low: float, high: float):
    def ok(value: Any) -> bool:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and low < value <= high)
    return ok


# Each field: (what it must be, the check). Bounds are far beyond any real GPU.
_RULES = {
    "name": ("a non-empty string of at most 64 characters",
             lambda v: isinstance(v, str) and 0 < len(v) <= 64),
    "bf16_flops": ("a number of FLOP/s above 0, at most 1e18", _number(0, 1e18)),
    "fp8_flops": ("a number of FLOP/s above 0, at most 1e18, or null",
                  lambda v: v is None or _number(0, 1e18)(v)),
    "hbm_bandwidth": ("a number of bytes/s above 0, at most 1e15", _number(0, 1e15)),
    "memory_gib": ("a number of GiB above 0, at most 1e6", _number(0, 1e6)),
    "host_link": ("a number of bytes/s above 0, at most 1e15", _number(0, 1e15)),
    "interconnect": ("a number of bytes/s above 0, at most 1e15", _number(0, 1e15)),
    "interconnect_kind": ("one of " + ", ".join(repr(k) for k in INTERCONNECTS),
                          lambda v: v in INTERCONNECTS),
    "source": ("a string", lambda v: isinstance(v, str)),
}


GPUS: dict[str, GpuSpec] = {g.name: g for g in (
    GpuSpec("a100-40gb", 312e12, None, 1.555e12, 39.59, 32e9, 300e9, "nvlink",
            f"A100 40GB SXM datasheet ({A100_SHEET}): BFLOAT16 Tensor Core 312 TFLOPS "
            "(624* with sparsity), no FP8; GPU memory bandwidth 1,555GB/s; NVLink 600GB/s; "
            "PCIe Gen4 64GB/s. Memory: 39.59 GiB, PyTorch's total capacity of an "
            "A100-SXM4-40GB (40,960 MiB) in public out-of-memory reports"),
    GpuSpec("a100-80gb", 312e12, None, 2.039e12, 79.35, 32e9, 300e9, "nvlink",
            f"A100 80GB SXM datasheet ({A100_SHEET}): BFLOAT16 Tensor Core 312 TFLOPS "
            "(624* with sparsity), no FP8; GPU memory bandwidth 2,039GB/s; NVLink 600GB/s; "
            "PCIe Gen4 64GB/s. Memory: 79.35 GiB, PyTorch's total capacity"),
    GpuSpec("h100-sxm", 989e12, 1979e12, 3.35e12, 79.22, 64e9, 450e9, "nvlink",
            f"H100 SXM datasheet ({H100_SHEET}): BFLOAT16 Tensor Core 1,979 teraFLOPS* and "
            "FP8 3,958 teraFLOPS* (* with sparsity); GPU memory bandwidth 3.35TB/s; NVLink "
            "900GB/s; PCIe Gen5 128GB/s. Memory: 79.22 GiB, vLLM's memory profile "
            "(vllm-project/vllm#10511)"),
    GpuSpec("h100-pcie", 756e12, 1513e12, 2.0e12, 79.22, 64e9, 64e9, "pcie",
            f"H100 PCIe datasheet ({H100_SHEET}): BFLOAT16 Tensor Core 1,513 teraFLOPS* and "
            "FP8 3,026 teraFLOPS* (* with sparsity); GPU memory bandwidth 2TB/s; PCIe Gen5 "
            "128GB/s (its NVLink bridge joins pairs only: GPUs talk over PCIe). Memory: the "
            "H100 SXM's 79.22 GiB, the same 80 GB of HBM"),
    GpuSpec("h200", 989e12, 1979e12, 4.8e12, 139.97, 64e9, 450e9, "nvlink",
            f"H200 SXM datasheet ({H200_SHEET}): BFLOAT16 Tensor Core 1,979 TFLOPS* and FP8 "
            "3,958 TFLOPS* (* with sparsity); GPU memory 141GB at 4.8TB/s; NVLink 900GB/s; "
            "PCIe Gen5 128GB/s. Memory: 139.97 GiB, nvidia-smi's 140.4 GiB less the 0.43 "
            "GiB an H100 loses"),
    GpuSpec("l40s", 362.05e12, 733e12, 0.864e12, 44.52, 32e9, 32e9, "pcie",
            f"L40S datasheet ({L40S_SHEET}): BF16 Tensor Core 362.05 TFLOPS (733* with "
            "sparsity), FP8 Tensor Core 733 TFLOPS (1,466*); GDDR6 864GB/s; PCIe Gen4 x16 "
            "64GB/s bidirectional, no NVLink. Memory: 44.52 GiB, PyTorch's total capacity "
            "of a 48 GB Ada card (46,068 MiB) in public out-of-memory reports"),
    GpuSpec("b200", 2250e12, 4500e12, 8.0e12, 178.35, 64e9, 900e9, "nvlink",
            f"HGX B200 specifications ({B200_SHEET}), eight GPUs: FP16/BF16 Tensor Core 36 "
            "PFLOPS* and FP8 72 PFLOPS* (* with sparsity), so 2.25 and 4.5 PFLOPS dense per "
            "GPU; HBM3e 8TB/s per GPU; NVLink 1.8TB/s per GPU; host over PCIe Gen5 x16 "
            "(64GB/s one way). Memory: 178.35 GiB, PyTorch's total capacity of a B200 "
            "(stas00/ml-engineering, debug/pytorch.md)"),
)}
