"""The KV pool sized by the GPU (`kv_pool.size_pool`, `fit_pool`) and the cost of tensor
parallelism, every number derived by hand from the model and GPU data.

The data (GIB = 2**30 bytes):
- GPU memory as the runtime reports it: H100 SXM 79.22 GiB, A100-80GB 79.35 GiB,
  H200 139.97 GiB. NVLink on an H100: 450e9 B/s per direction.
- Llama-3-8B (the Llama-3.1-8B config; tests/test_models.py derives the count):
  8,030,261,248 parameters x 2 B = 16,060,522,496 B of weights = 14.9575 GiB (the
  rounded 8.0e9 of the first catalogue gave 1.6e10 B = 14.9012 GiB); 32 layers, 8 KV
  heads, head dim 128, bf16: KV per token 2 x 32 x 8 x 128 x 2 = 131,072 B, so a
  16-token block is 2,097,152 B = 2 MiB.
- Llama-3-70B (the Llama-3.1-70B config): 70,553,706,496 parameters x 2 B =
  141,107,412,992 B = 131.4165 GiB (was 70.6e9, 131.50 GiB); 80 layers, 8 KV heads,
  head dim 128, d_model 8192: KV per token 2 x 80 x 8 x 128 x 2 = 327,680 B, a 16-token
  block 5,242,880 B = 5 MiB on one GPU.
- Defaults: gpu_memory_utilization U = 0.9, activation reserve 3.05 GiB per GPU,
  block_size 16.

size_pool, per GPU: usable = U x memory x GIB; weights = parameters x 2 / tp;
reserve = 3.05 x GIB; kv = usable - weights - reserve; block_bytes = 16 x 2 x layers x
max(1, kv_heads // tp) x 128 x 2; blocks = floor(kv / block_bytes), refused below 1.
"""
from __future__ import annotations

import json
import math

import pytest

from conftest import req, simulate, run_cli as run, write_trace as write
from scheduler_sim.gpu.catalogue import GPUS, MODELS
from scheduler_sim.gpu.costmodel import CostModel
from scheduler_sim.gpu.kv_pool import fit_pool, size_pool
from scheduler_sim.records.errors import UsageError
from scheduler_sim.records.options import Options

L8, L70 = MODELS["llama-3-8b"], MODELS["llama-3-70b"]
H100, A100, H200 = GPUS["h100-sxm"], GPUS["a100-80gb"], GPUS["h200"]
COST8 = "llama-3-8b/h100-sxm"
W8, W70 = 16_060_522_496, 141_107_412_992  # weight bytes
TRACE = [req("a", 0, 4, 2)]  # one small request: the pool, not the run, is under test






# --- the data ----------------------------------------------------------------------------

def test_gpu_memory_and_model_data():
    """The figures every sizing below starts from: GPU memory 79.22 / 79.35 / 139.97 GiB,
    H100 NVLink 450e9 B/s; weights 8,030,261,248 x 2 = 16,060,522,496 B and
    70,553,706,496 x 2 = 141,107,412,992 B; KV per token 131,072 B (8B) and 327,680 B
    (70B)."""
    assert (H100.memory_gib, A100.memory_gib, H200.memory_gib) == (79.22, 79.35, 139.97)
    assert H100.interconnect == 450e9
    assert (L8.weight_bytes, L70.weight_bytes) == (W8, W70)
    assert (L8.kv_bytes_per_token, L70.kv_bytes_per_token) == (131_072, 327_680)


def test_kv_bytes_per_token_per_gpu_split_and_replicated():
    """Llama-3-8B's 8 KV heads split over tp GPUs: each head costs 2 (K and V) x 32 layers
    x 128 x 2 B = 16,384 B per token. tp 1 -> 8 heads = 131,072 B; tp 2 -> 4 heads =
    65,536 B; tp 8 -> 1 head = 16,384 B; tp 16 -> 8 // 16 = 0, replicated as max(1, 0) =
    1 head = 16,384 B."""
    assert [L8.kv_bytes_per_token_per_gpu(tp) for tp in (1, 2, 8, 16)] == [
        131_072, 65_536, 16_384, 16_384]


# --- size_pool ---------------------------------------------------------------------------

def test_llama_8b_on_one_h100_at_0_9():
    """usable = 0.9 x 79.22 GiB = 71.298 GiB = 76,555,644,567.552 B; weights
    16,060,522,496 B = 14.9575 GiB; reserve 3.05 GiB = 3,274,912,563.2 B; kv = 71.298 -
    14.9575 - 3.05 = 53.2905 GiB = 57,220,209,508.352 B; / 2,097,152 B (2 MiB) =
    27,284.72 -> 27,284 blocks."""
    p = size_pool(L8, H100, 16, 0.9)
    assert p.blocks == 27_284
    assert p.block_bytes == 2_097_152
    assert p.weights == W8
    assert p.usable == pytest.approx(76_555_644_567.552, rel=1e-12)
    assert p.reserve == pytest.approx(3_274_912_563.2, rel=1e-12)
    assert p.kv == pytest.approx(57_220_209_508.352, rel=1e-12)


def test_llama_8b_on_one_h100_at_0_55():
    """usable = 0.55 x 79.22 GiB = 43.571 GiB; kv = 43.571 - 14.9575 - 3.05 = 25.5635 GiB
    = 27,448,569,954.304 B; / 2 MiB = 13,088.50 -> 13,088 blocks."""
    p = size_pool(L8, H100, 16, 0.55)
    assert p.blocks == 13_088
    assert p.kv == pytest.approx(27_448_569_954.304, rel=1e-12)


def test_block_size_scales_the_block_not_the_memory():
    """Block size 4 with Llama-3-8B on one H100 at 0.9: a block is 4 x 131,072 = 524,288 B
    (0.5 MiB); the same 53.2905 GiB of KV = 57,220,209,508.352 B / 524,288 = 109,138.89 ->
    109,138 blocks."""
    p = size_pool(L8, H100, 4, 0.9)
    assert (p.block_bytes, p.blocks) == (524_288, 109_138)


def test_llama_70b_does_not_fit_on_one_a100():
    """usable = 0.9 x 79.35 GiB = 71.415 GiB; weights 141,107,412,992 B = 131.42 GiB alone
    exceed it: kv = 71.415 - 131.42 - 3.05 = -63.05 GiB < one 5 MiB block: ValueError with
    the arithmetic (131.42 GiB weights, 3.05 GiB reserve, 0.9 x 79.35 GiB = 71.41 GiB), and
    since weights + reserve >= the whole 79.35 GiB it points at --tp."""
    with pytest.raises(ValueError) as info:
        size_pool(L70, A100, 16, 0.9)
    text = str(info.value)
    for piece in ("llama-3-70b", "a100-80gb", "weights 131.42 GiB", "3.05 GiB",
                  "0.9 x 79.35 GiB = 71.41 GiB", "on one GPU", "--tp"):
        assert piece in text, piece


def test_llama_70b_does_not_fit_on_one_h200_either():
    """usable = 0.9 x 139.97 GiB = 125.973 GiB < 131.42 GiB of weights: kv = 125.973 -
    131.417 - 3.05 = -8.49 GiB: refused, naming 0.9 x 139.97 GiB = 125.97 GiB."""
    with pytest.raises(ValueError, match=r"0\.9 x 139\.97 GiB = 125\.97 GiB"):
        size_pool(L70, H200, 16, 0.9)


def test_llama_70b_on_two_h100s():
    """tp 2, per GPU: usable 71.298 GiB = 76,555,644,567.552 B; weights 141,107,412,992 / 2
    = 70,553,706,496 B = 65.7083 GiB; kv = 76,555,644,567.552 - 70,553,706,496 -
    3,274,912,563.2 = 2,727,025,508.352 B (2.5397 GiB); KV heads 8 / 2 = 4, block = 16 x 2 x
    80 x 4 x 128 x 2 = 2,621,440 B (2.5 MiB); 2,727,025,508.352 / 2,621,440 = 1,040.28 ->
    1,040 blocks."""
    p = size_pool(L70, H100, 16, 0.9, tp=2)
    assert (p.tp, p.weights, p.block_bytes, p.blocks) == (2, W70 / 2, 2_621_440, 1_040)
    assert p.kv == pytest.approx(2_727_025_508.352, rel=1e-12)


def test_llama_70b_on_four_h100s():
    """tp 4, per GPU: weights 141,107,412,992 / 4 = 35,276,853,248 B = 32.8541 GiB; kv =
    76,555,644,567.552 - 35,276,853,248 - 3,274,912,563.2 = 38,003,878,756.352 B (35.3939
    GiB); KV heads 8 / 4 = 2, block = 16 x 2 x 80 x 2 x 128 x 2 = 1,310,720 B (1.25 MiB);
    38,003,878,756.352 / 1,310,720 = 28,994.66 -> 28,994 blocks."""
    p = size_pool(L70, H100, 16, 0.9, tp=4)
    assert (p.weights, p.block_bytes, p.blocks) == (W70 / 4, 1_310_720, 28_994)
    assert p.kv == pytest.approx(38_003_878_756.352, rel=1e-12)


def test_describe_states_the_arithmetic():
    """One H100, Llama-3-8B: `KV pool 27,284 blocks of 2 MiB: 0.9 x 79.22 GiB - weights
    14.96 GiB - activation reserve 3.05 GiB = 53.29 GiB of KV`. Two H100s, Llama-3-70B:
    1,040 blocks of 2.5 MiB per GPU (tp 2), weights 65.71 GiB, 2.54 GiB of KV."""
    assert size_pool(L8, H100, 16, 0.9).describe() == (
        "KV pool 27,284 blocks of 2 MiB: 0.9 x 79.22 GiB - weights 14.96 GiB - "
        "activation reserve 3.05 GiB = 53.29 GiB of KV")
    assert size_pool(L70, H100, 16, 0.9, tp=2).describe() == (
        "KV pool 1,040 blocks of 2.5 MiB per GPU (tp 2): 0.9 x 79.22 GiB - weights "
        "65.71 GiB - activation reserve 3.05 GiB = 2.54 GiB of KV")


# --- fit_pool ------------------------------------------------------------------------------

def test_fit_pool_derives_num_blocks_when_not_given():
    """cost model llama-3-8b/h100-sxm, no num_blocks: num_blocks becomes 27,284 (see
    above) and its origin `derived`; without a cost model nothing changes (2048, no
    sizing)."""
    options, pool = fit_pool(Options.resolve({"cost_model": COST8}))
    assert (options.num_blocks, options.origin["num_blocks"], pool.blocks) == (
        27_284, "derived", 27_284)
    plain = Options.resolve({})
    assert fit_pool(plain) == (plain, None)


def test_fit_pool_keeps_a_given_num_blocks_that_fits():
    """num_blocks 100 <= 27,284: kept, origin stays `trace`; the sizing still reports
    27,284."""
    options, pool = fit_pool(Options.resolve({"cost_model": COST8, "num_blocks": 100}))
    assert (options.num_blocks, options.origin["num_blocks"], pool.blocks) == (
        100, "trace", 27_284)


def test_fit_pool_refuses_a_num_blocks_larger_than_the_pool():
    """num_blocks 27,285 > 27,284: UsageError naming both counts."""
    with pytest.raises(UsageError) as info:
        fit_pool(Options.resolve({"cost_model": COST8, "num_blocks": 27_285}))
    assert "27,285" in str(info.value) and "27,284" in str(info.value)


def test_fit_pool_turns_the_sizing_error_into_a_usage_error():
    """Llama-3-70B on one A100 (weights 131.42 GiB > 71.41 GiB usable): UsageError."""
    with pytest.raises(UsageError, match="weights 131.42 GiB"):
        fit_pool(Options.resolve({"cost_model": "llama-3-70b/a100-80gb"}))


def test_tp_must_divide_the_kv_heads_and_stay_in_one_node():
    """Llama-3-8B has 8 KV heads: tp 3 (8 % 3 = 2, 3 % 8 = 3) is refused naming 8 and 3;
    tp 16 is refused because the all-reduces are priced over NVLink, which joins at most
    8 GPUs; tp 8 is accepted: 1 head per GPU, block 16 x 16,384 = 262,144 B; kv =
    76,555,644,567.552 - 16,060,522,496 / 8 - 3,274,912,563.2 = 71,273,166,692.352 B /
    262,144 = 271,885.55 -> 271,885 blocks."""
    with pytest.raises(UsageError, match="8 KV heads.*got 3"):
        fit_pool(Options.resolve({"cost_model": COST8, "tp": 3}))
    with pytest.raises(UsageError, match="tp must be at most 8.*got 16"):
        fit_pool(Options.resolve({"cost_model": COST8, "tp": 16}))
    options, pool = fit_pool(Options.resolve({"cost_model": COST8, "tp": 8}))
    assert (pool.block_bytes, options.num_blocks) == (262_144, 271_885)


def test_engine_runs_with_the_derived_pool():
    """The engine fits the pool before running: Llama-3-70B on 2 H100s (tp 2) replays with
    num_blocks 1,040 (derived, see above), and the request a (P 4, N 2) completes."""
    s = simulate(TRACE, cost_model="llama-3-70b/h100-sxm", tp=2)
    assert (s.result.options.num_blocks, s.result.options.origin["num_blocks"]) == (
        1_040, "derived")
    assert s.summary["completed"] == 1


# --- the command line ----------------------------------------------------------------------

def test_replay_header_describes_the_pool(tmp_path):
    """`replay --cost-model llama-3-8b/h100-sxm` prints the pool line of `describe` (27,284
    blocks of 2 MiB, 53.29 GiB of KV) and the options line gives `num_blocks 27284
    (derived)`."""
    path = write(tmp_path, TRACE)
    status, out, err = run(["replay", path, "--cost-model", COST8])
    assert status == 0, err
    lines = out.splitlines()
    assert ("KV pool 27,284 blocks of 2 MiB: 0.9 x 79.22 GiB - weights 14.96 GiB - "
            "activation reserve 3.05 GiB = 53.29 GiB of KV") in lines
    options_line = next(line for line in lines if line.startswith("options: "))
    assert "num_blocks 27284 (derived)" in options_line


def test_replay_header_with_tp_and_utilization(tmp_path):
    """`--cost-model llama-3-70b/h100-sxm --tp 4`: `cost model llama-3-70b/h100-sxm on 4
    GPUs`, pool 28,994 blocks of 1.25 MiB per GPU (tp 4), weights 32.85 GiB, 35.39 GiB of
    KV. With `--gpu-memory-utilization 0.55` instead on Llama-3-8B: 13,088 blocks,
    0.55 x 79.22 GiB, 25.56 GiB of KV."""
    path = write(tmp_path, TRACE)
    status, out, err = run(["replay", path, "--cost-model", "llama-3-70b/h100-sxm",
                            "--tp", "4"])
    assert status == 0, err
    lines = out.splitlines()
    assert any(line.startswith("cost model llama-3-70b/h100-sxm on 4 GPUs · calibration h100-sxm")
               for line in lines)
    assert ("KV pool 28,994 blocks of 1.25 MiB per GPU (tp 4): 0.9 x 79.22 GiB - weights "
            "32.85 GiB - activation reserve 3.05 GiB = 35.39 GiB of KV") in lines
    status, out, err = run(["replay", path, "--cost-model", COST8,
                            "--gpu-memory-utilization", "0.55"])
    assert status == 0, err
    assert ("KV pool 13,088 blocks of 2 MiB: 0.55 x 79.22 GiB - weights 14.96 GiB - "
            "activation reserve 3.05 GiB = 25.56 GiB of KV") in out.splitlines()


def test_replay_json_has_the_pool(tmp_path):
    """`--json` with the 8B on one H100: a `pool` object with blocks 27,284, block_bytes
    2,097,152, weight_bytes 16,060,522,496; options.num_blocks 27,284, origin `derived`.
    Without a cost model there is no `pool`."""
    path = write(tmp_path, TRACE)
    status, out, err = run(["replay", path, "--cost-model", COST8, "--json"])
    assert status == 0, err
    doc = json.loads(out)
    assert (doc["pool"]["blocks"], doc["pool"]["block_bytes"], doc["pool"]["weight_bytes"]) == (
        27_284, 2_097_152, W8)
    assert (doc["options"]["num_blocks"], doc["origin"]["num_blocks"]) == (27_284, "derived")
    status, out, err = run(["replay", path, "--json"])
    assert status == 0, err
    assert "pool" not in json.loads(out)


@pytest.mark.parametrize("extra", [[], ["--num-blocks", "10"]])
def test_llama_70b_on_one_a100_is_refused(tmp_path, extra):
    """Llama-3-70B on one A100-80GB, with or without an explicit --num-blocks: exit 2, no
    output, one error line with weights 131.42 GiB and the usable 0.9 x 79.35 = 71.41 GiB,
    and no traceback."""
    path = write(tmp_path, TRACE)
    status, out, err = run(["replay", path, "--cost-model", "llama-3-70b/a100-80gb", *extra])
    assert status == 2
    assert out == ""
    assert "131.42 GiB" in err and "71.41 GiB" in err
    assert "Traceback" not in err
    assert err.startswith("scheduler-sim: error: ") and err.count("\n") == 1


def test_explicit_num_blocks_larger_than_the_pool_is_refused(tmp_path):
    """`--num-blocks 27285` with the 8B on one H100 (pool 27,284): exit 2 naming both."""
    path = write(tmp_path, TRACE)
    status, out, err = run(["replay", path, "--cost-model", COST8, "--num-blocks", "27285"])
    assert status == 2 and out == ""
    assert "27,285" in err and "27,284" in err and "Traceback" not in err


def test_explicit_num_blocks_smaller_than_the_pool_is_kept(tmp_path):
    """`--num-blocks 100` (<= 27,284): exit 0, options.num_blocks 100 from `flag`, while
    the `pool` object still reports the 27,284 the GPU could hold."""
    path = write(tmp_path, TRACE)
    status, out, err = run(["replay", path, "--cost-model", COST8, "--num-blocks", "100",
                            "--json"])
    assert status == 0, err
    doc = json.loads(out)
    assert (doc["options"]["num_blocks"], doc["origin"]["num_blocks"]) == (100, "flag")
    assert doc["pool"]["blocks"] == 27_284


def test_tp_3_with_llama_8b_is_refused(tmp_path):
    """`--tp 3` with Llama-3-8B (8 KV heads): 3 neither divides 8 nor is a multiple of it:
    exit 2 naming tp 3, no traceback."""
    path = write(tmp_path, TRACE)
    status, out, err = run(["replay", path, "--cost-model", COST8, "--tp", "3"])
    assert status == 2 and out == ""
    assert "got 3" in err and "8 KV heads" in err and "Traceback" not in err


# --- the cost of tensor parallelism -----------------------------------------------------------

# The cost model's coefficients here are the uncalibrated physics (`Coefficients()`,
# the default of `CostModel`): the linear layers read weights at 0.78 of HBM bandwidth
# and compute at 0.75 of peak, blended as sqrt(m^2 + c^2); KV is read and written at
# 0.8 of HBM, the elementwise kernels move their bytes at 0.5; an all-reduce runs at 0.8
# of the link; every dispatch adds 0.5 ms. An H100: 989e12 FLOP/s, 3.35e12 B/s of HBM,
# so weights at 2.613e12 B/s, GEMMs at 741.75e12 FLOP/s, KV at 2.68e12 B/s, elementwise at
# 1.675e12 B/s, all-reduces at 450e9 x 0.8 = 360e9 B/s.
WEIGHT_RATE, GEMM_RATE, KV_RATE, ELEMENTWISE_RATE, LINK_RATE = (
    3.35e12 * 0.78, 989e12 * 0.75, 3.35e12 * 0.8, 3.35e12 * 0.5, 450e9 * 0.8)


def test_decode_cost_on_two_h100s():
    """Llama-3-8B (6,979,321,856 linear parameters, vocabulary 128,256, d 4,096, MLP width
    14,336, 32 heads and 8 KV heads of 128), 8 decode rows whose contexts sum to 8,000, tp
    2: each GPU holds half of every weight and of every token's KV.
    - linear: 6,979,321,856 B read / 2.613e12 = 2.67100 ms; 2 x 3,489,660,928 x 8 =
      55,834,574,848 FLOPs / 741.75e12 = 0.0752741 ms; sqrt(2.67100^2 + 0.0752741^2) =
      2.67206 ms.
    - LM head: 128,256 x 4,096 / 2 = 262,668,288 parameters, 525,336,576 B / 2.613e12 =
      0.201047 ms; 2 x 262,668,288 x 8 rows / 741.75e12 = 0.00566592 ms; 0.201127 ms.
    - KV: 32 layers x 2 x 4 KV heads x 128 x 2 B = 65,536 B a token per GPU; read (8,000 +
      8) x 65,536 / 2.68e12 = 0.195825 ms, written 8 x 65,536 / 2.68e12 = 0.000195630 ms.
    - elementwise: 32 x 2 x (8 x 4,096 + (3 x 14,336 + 2 x 40 x 128) / 2) = 3,801,088 B a
      token x 8 / 1.675e12 = 0.0181544 ms.
    - all-reduce: 2 per layer of 2 x (2 - 1) / 2 x 4,096 x 2 B a token: 2 x 32 x 8,192 =
      524,288 B a token x 8 / 360e9 = 0.0116508 ms.
    - step 0.5 ms. In all 3.599013 ms.
    On one H100 the same decode: linear sqrt(5.34200^2 + 0.150548^2) = 5.34412 ms, LM head
    sqrt(0.402095^2 + 0.0113318^2) = 0.402254 ms, KV 8,008 x 131,072 / 2.68e12 = 0.391651
    ms read and 0.000391 written, elementwise 8 x 5,505,024 / 1.675e12 = 0.0262927 ms, no
    all-reduce, step 0.5 ms: 6.664709 ms."""
    two = CostModel(L8, H100, tp=2)
    terms = two.breakdown([], 8, 8_000)
    assert terms["linear"] == pytest.approx(
        math.hypot(6_979_321_856 / WEIGHT_RATE, 55_834_574_848 / GEMM_RATE), rel=1e-12)
    assert terms["lm_head"] == pytest.approx(
        math.hypot(525_336_576 / WEIGHT_RATE, 2 * 262_668_288 * 8 / GEMM_RATE), rel=1e-12)
    assert terms["attention_decode"] == pytest.approx(8_008 * 65_536 / KV_RATE, rel=1e-12)
    assert terms["kv_write"] == pytest.approx(8 * 65_536 / KV_RATE, rel=1e-12)
    assert terms["elementwise"] == pytest.approx(8 * 3_801_088 / ELEMENTWISE_RATE, rel=1e-12)
    assert terms["allreduce"] == pytest.approx(8 * 524_288 / LINK_RATE, rel=1e-12)
    assert terms["step"] == 0.0005 and terms["attention_prefill"] == terms["floors"] == 0
    assert two.decode_seconds(8, 8_000) == pytest.approx(0.003599013, rel=1e-6)
    one = CostModel(L8, H100).decode_seconds(8, 8_000)
    assert one == pytest.approx(
        math.hypot(13_958_643_712 / WEIGHT_RATE, 2 * 6_979_321_856 * 8 / GEMM_RATE)
        + math.hypot(1_050_673_152 / WEIGHT_RATE, 2 * 525_336_576 * 8 / GEMM_RATE)
        + 8_016 * 131_072 / KV_RATE + 8 * 5_505_024 / ELEMENTWISE_RATE + 0.0005, rel=1e-12)
    assert one == pytest.approx(0.006664709, rel=1e-6)


def test_decode_cost_of_llama_70b_on_four_h100s():
    """Llama-3-70B (68,451,041,280 linear parameters, d 8,192, MLP width 28,672, 64 heads
    and 8 KV heads of 128, 80 layers), 8 decode rows whose contexts sum to 8,000, tp 4.
    - linear: 68,451,041,280 x 2 / 4 = 34,225,520,640 B / 2.613e12 = 13.0982 ms; 2 x
      68,451,041,280 / 4 x 8 = 273,804,165,120 FLOPs / 741.75e12 = 0.369133 ms;
      sqrt(13.0982^2 + 0.369133^2) = 13.1034 ms.
    - LM head: 128,256 x 8,192 / 4 = 262,668,288 parameters: 0.201127 ms as on two GPUs
      for the 8B (same count).
    - KV: 80 x 2 x 2 KV heads x 128 x 2 B = 81,920 B a token per GPU; read 8,008 x 81,920
      / 2.68e12 = 0.244782 ms, written 8 x 81,920 / 2.68e12 = 0.000244537 ms.
    - elementwise: 80 x 2 x (8 x 8,192 + (3 x 28,672 + 2 x 72 x 128) / 4) = 14,663,680 B a
      token x 8 / 1.675e12 = 0.0700355 ms.
    - all-reduce: 2 x 80 x 2 x 3/4 x 8,192 x 2 B = 3,932,160 B a token x 8 / 360e9 =
      0.0873813 ms.
    - step 0.5 ms. In all 14.20694 ms."""
    cost = CostModel(L70, H100, tp=4)
    expected = (math.hypot(34_225_520_640 / WEIGHT_RATE, 273_804_165_120 / GEMM_RATE)
                + math.hypot(525_336_576 / WEIGHT_RATE, 2 * 262_668_288 * 8 / GEMM_RATE)
                + 8_016 * 81_920 / KV_RATE + 8 * 14_663_680 / ELEMENTWISE_RATE
                + 8 * 3_932_160 / LINK_RATE + 0.0005)
    assert cost.decode_seconds(8, 8_000) == pytest.approx(expected, rel=1e-12)
    assert cost.decode_seconds(8, 8_000) == pytest.approx(0.01420694, rel=1e-6)
    assert cost.breakdown([], 8, 8_000)["allreduce"] == pytest.approx(8 * 3_932_160 / LINK_RATE,
                                                                     rel=1e-12)
