"""The GPU catalogue (gpu/gpus.py) and GPU spec files (`--gpu FILE.json`).

Datasheet figures are dense: half of a figure printed "with sparsity" (H100 SXM BF16
1,979 -> 989, FP8 3,958 -> 1,979; H100 PCIe 1,513 -> 756, 3,026 -> 1,513; B200 per GPU
4.5 PFLOPS -> 2,250, 9 -> 4,500); bandwidths one way (NVLink 900 GB/s -> 450e9; PCIe
Gen5 128 GB/s -> 64e9, Gen4 64 GB/s -> 32e9).
"""
from __future__ import annotations

import json

import pytest

from conftest import req, run_cli, write_trace
from scheduler_sim.gpu.gpus import GPUS, GpuSpec
from scheduler_sim.records.errors import ConfigError

H100_JSON = {"name": "my-h100", "bf16_flops": 989e12, "fp8_flops": 1979e12,
             "hbm_bandwidth": 3.35e12, "memory_gib": 79.22, "host_link": 64e9,
             "interconnect": 450e9, "interconnect_kind": "nvlink"}


def test_the_catalogue_figures():
    """Each GPU: (bf16, fp8 TFLOP/s dense, HBM TB/s, memory GiB as the runtime reports it,
    host link and GPU link GB/s one way, link kind)."""
    figures = {name: (g.bf16_flops / 1e12, None if g.fp8_flops is None else g.fp8_flops / 1e12,
                      g.hbm_bandwidth / 1e12, g.memory_gib, g.host_link / 1e9,
                      g.interconnect / 1e9, g.interconnect_kind) for name, g in GPUS.items()}
    assert figures == {
        "a100-40gb": (312, None, 1.555, 39.59, 32, 300, "nvlink"),
        "a100-80gb": (312, None, 2.039, 79.35, 32, 300, "nvlink"),
        "h100-sxm": (989, 1979, 3.35, 79.22, 64, 450, "nvlink"),
        "h100-pcie": (756, 1513, 2.0, 79.22, 64, 64, "pcie"),
        "h200": (989, 1979, 4.8, 139.97, 64, 450, "nvlink"),
        "l40s": (362.05, 733, 0.864, 44.52, 32, 32, "pcie"),
        "b200": (2250, 4500, 8.0, 178.35, 64, 900, "nvlink"),
    }


def test_every_gpu_names_its_sources():
    """Every figure's source is in `source`: an NVIDIA URL and the figures as printed."""
    for gpu in GPUS.values():
        assert "https://" in gpu.source and "nvidia.com" in gpu.source, gpu.name
        assert "GiB" in gpu.source, gpu.name  # where the memory figure comes from


def test_peak_flops_is_the_bf16_peak():
    """The old name of the bf16 peak keeps working."""
    assert GPUS["h100-sxm"].peak_flops == 989e12
    assert GPUS["a100-80gb"].peak_flops == GPUS["a100-80gb"].bf16_flops == 312e12


def test_a_spec_file_reads_every_field():
    """A complete object gives the spec; integers become floats; `source` defaults to the
    file, `fp8_flops` to null; without `name` the file's name is used."""
    gpu = GpuSpec.from_json(H100_JSON, "h.json")
    assert gpu == GpuSpec("my-h100", 989e12, 1979e12, 3.35e12, 79.22, 64e9, 450e9, "nvlink",
                          "h.json")
    bare = {k: v for k, v in H100_JSON.items() if k not in ("name", "fp8_flops")}
    bare["memory_gib"] = 80
    gpu = GpuSpec.from_json(bare, "gpus/x.json", "x")
    assert (gpu.name, gpu.fp8_flops, gpu.memory_gib) == ("x", None, 80.0)


def test_a_bad_spec_file_lists_every_problem():
    """Missing, mistyped, out of range and unknown fields: one problem each, in field
    order, the unknown ones last, each naming the file and the field."""
    data = dict(H100_JSON, bf16_flops="fast", memory_gib=-1, interconnect_kind="infiniband",
                hbm=1)
    del data["host_link"]
    with pytest.raises(ConfigError) as info:
        GpuSpec.from_json(data, "g.json")
    assert info.value.problems == [
        "g.json: field 'bf16_flops': must be a number of FLOP/s above 0, at most 1e18, got "
        "'fast'",
        "g.json: field 'memory_gib': must be a number of GiB above 0, at most 1e6, got -1",
        "g.json: field 'host_link': missing (a number of bytes/s above 0, at most 1e15 is "
        "required)",
        "g.json: field 'interconnect_kind': must be one of 'nvlink', 'pcie', got 'infiniband'",
        "g.json: field 'hbm': not a GPU spec field (known: name, bf16_flops, fp8_flops, "
        "hbm_bandwidth, memory_gib, host_link, interconnect, interconnect_kind, source), "
        "got 1"]
    with pytest.raises(ConfigError, match="g.json: a GPU spec file holds a JSON object"):
        GpuSpec.from_json([], "g.json")


def test_gpu_file_on_the_command_line(tmp_path):
    """`--gpu FILE.json` prices the run on it: the header names it and the file, and the
    pool uses its memory; a bad file exits 2 with its problems; `cost` takes it too."""
    path = write_trace(tmp_path, [req("a", 0, 4, 2)])
    spec = tmp_path / "big.json"
    spec.write_text(json.dumps(dict(H100_JSON, name="big", memory_gib=160)))
    status, out, err = run_cli(["replay", path, "--model", "llama-3-8b", "--gpu", str(spec)])
    assert status == 0, err
    assert f"cost model llama-3-8b/big (gpu from {spec}) · calibration none" in out.splitlines()
    assert "0.9 x 160 GiB" in out
    status, out, err = run_cli(["cost", "--model", "llama-3-8b", "--gpu", str(spec),
                                "--seq", "1024"])
    assert status == 0 and "llama-3-8b on big" in out
    spec.write_text(json.dumps({"name": "", "bf16_flops": 0}))
    status, out, err = run_cli(["replay", path, "--model", "llama-3-8b", "--gpu", str(spec)])
    assert status == 2 and out == ""
    assert err.splitlines()[0] == (f"{spec}: field 'name': must be a non-empty string of at "
                                   "most 64 characters, got ''")
    assert len(err.splitlines()) == 7  # name, bf16_flops and five missing fields
