"""The cost model's terms (§9), one by one, on a tiny model and GPU with round numbers.

The tiny model: L = 2 layers, d = 8, 2 heads and 1 KV head of head_dim 4,
a gated MLP of width 16, vocabulary 10, bf16 (2 bytes a parameter).
- attention weights per layer: Q 8 x 8 + K, V 2 x 8 x 4 + O 8 x 8 = 64 + 64 + 64
  = 192; MLP 3 x 8 x 16 = 384; linear parameters 2 x 576 = 1,152 (2,304 bytes).
- LM head 10 x 8 = 80 parameters (160 bytes).
- KV bytes per token: 2 layers x (2 x 1 x 4) x 2 bytes = 32.
- elementwise bytes per token: L x 2 x (8 d + 3 I + 2 (heads + kv_heads) head_dim)
  = 2 x 2 x (64 + 48 + 24) = 544.
- attention FLOPs per (query, key) pair, all layers: 4 x 2 x 4 x 2 = 64.
The tiny GPU: 1e6 FLOP/s, 1e4 B/s of HBM, 1e3 B/s between GPUs. Every efficiency
0.5, so compute runs at 5e5 FLOP/s and memory at 5e3 B/s; sharpness 1 (the two
GEMM regimes add up); floors 1, 2 and 3 ms; step 0.1 s, 0.01 s a sampled row;
all-reduce 0.01 s a call.
"""
from __future__ import annotations

import math
import random

import pytest

from scheduler_sim.gpu.coefficients import Coefficients
from scheduler_sim.gpu.costmodel import CostModel
from scheduler_sim.gpu.gpus import GpuSpec
from scheduler_sim.gpu.models import ModelSpec

TINY = ModelSpec(name="tiny", layers=2, d_model=8, heads=2, kv_heads=1, head_dim=4,
                 intermediate=16, vocab=10)
GPU = GpuSpec(name="toy", bf16_flops=1e6, fp8_flops=None, hbm_bandwidth=1e4, memory_gib=1.0,
              host_link=1e3, interconnect=1e3, interconnect_kind="nvlink", source="test")
K = Coefficients(gemm_efficiency=0.5, gemm_bandwidth_efficiency=0.5, gemm_sharpness=1.0,
                 gemm_half_tokens=0.0, gemm_tile_tokens=1.0, attention_efficiency=0.5,
                 attention_half_tokens=0.0, kv_read_efficiency=0.5, elementwise_efficiency=0.5,
                 layer_floor=0.001, decode_attention_floor=0.002, prefill_attention_floor=0.003,
                 allreduce_latency=0.01, interconnect_efficiency=0.5, step_overhead=0.1,
                 row_overhead=0.01, request_overhead=0.25)


def test_the_tiny_models_counts():
    assert TINY.linear_params == 1152
    assert TINY.kv_bytes_per_token == 32


def test_one_prefill_chunk_term_by_term():
    """A chunk of 4 tokens with no context, tp 1:
    linear 2,304 / 5e3 + 2 x 1,152 x 4 / 5e5 = 0.4608 + 0.018432 = 0.479232;
    LM head (1 sampled row) 160 / 5e3 + 2 x 80 / 5e5 = 0.032 + 0.00032 = 0.03232;
    prefill attention 4 x 5 / 2 = 10 pairs x 64 / 5e5 = 0.00128;
    KV write 4 x 32 / 5e3 = 0.0256; elementwise 4 x 544 / 5e3 = 0.4352;
    floors 2 x (1 + 3) ms = 0.008; step 0.1 + 0.01 x 1 = 0.11; total 1.091632."""
    cost = CostModel(TINY, GPU, K, tp=1)
    terms = cost.breakdown([(4, 0)], 0, 0)
    expected = {"linear": 0.479232, "lm_head": 0.03232, "attention_prefill": 0.00128,
                "attention_decode": 0.0, "kv_write": 0.0256, "elementwise": 0.4352,
                "floors": 0.008, "allreduce": 0.0, "step": 0.11}
    assert terms.keys() == expected.keys()
    for name, value in expected.items():
        assert terms[name] == pytest.approx(value, rel=1e-12, abs=1e-15), name
    assert cost.dispatch_seconds([(4, 0)], 0, 0) == pytest.approx(1.091632, rel=1e-12)


def test_one_decode_dispatch_term_by_term():
    """3 decode rows whose contexts sum to 12: linear 0.4608 + 2 x 1,152 x 3 / 5e5 =
    0.474624; LM head 0.032 + 2 x 80 x 3 / 5e5 = 0.03296; decode attention reads
    (12 + 3) x 32 / 5e3 = 0.096; KV write 3 x 32 / 5e3 = 0.0192; elementwise 3 x 544 /
    5e3 = 0.3264; floors 2 x (1 + 2) ms = 0.006; step 0.1 + 3 x 0.01 = 0.13;
    total 1.085184."""
    cost = CostModel(TINY, GPU, K, tp=1)
    terms = cost.breakdown([], 3, 12)
    assert terms["linear"] == pytest.approx(0.474624, rel=1e-12)
    assert terms["lm_head"] == pytest.approx(0.03296, rel=1e-12)
    assert terms["attention_decode"] == pytest.approx(0.096, rel=1e-12)
    assert terms["kv_write"] == pytest.approx(0.0192, rel=1e-12)
    assert terms["elementwise"] == pytest.approx(0.3264, rel=1e-12)
    assert terms["floors"] == pytest.approx(0.006, rel=1e-12)
    assert terms["step"] == pytest.approx(0.13, rel=1e-12)
    assert cost.decode_seconds(3, 12) == pytest.approx(1.085184, rel=1e-12)
    assert cost.dispatch_seconds([], 3, 12) == cost.decode_seconds(3, 12)


def test_tensor_parallel_all_reduce():
    """tp 2, a chunk of 4 tokens: 2 all-reduces per layer, each 0.01 s plus a ring's
    2 (2 - 1) / 2 x 8 x 2 bytes per token over 1e3 x 0.5 B/s: 2 x 2 x 0.01 = 0.04 and
    2 x 2 x 8 x 2 x 4 tokens / 500 = 0.512; 0.552 in all."""
    cost = CostModel(TINY, GPU, K, tp=2)
    assert cost.breakdown([(4, 0)], 0, 0)["allreduce"] == pytest.approx(0.552, rel=1e-12)


def test_a_chunk_after_context_attends_to_it():
    """2 tokens after 3 of context: 2 x 3 + 2 x 3 / 2 = 9 pairs x 64 / 5e5 = 0.001152."""
    cost = CostModel(TINY, GPU, K, tp=1)
    assert cost.breakdown([(2, 3)], 0, 0)["attention_prefill"] == pytest.approx(0.001152)


def test_gemm_blend_tile_and_half_tokens():
    """Sharpness 2: sqrt(m^2 + c^2); T0 = 3 and tiles of 8: 5 tokens compute as
    ceil(8 / 8) x 8 = 8, 6 tokens as ceil(9 / 8) x 8 = 16."""
    k = K.replace(gemm_sharpness=2.0, gemm_half_tokens=3.0, gemm_tile_tokens=8.0)
    cost = CostModel(TINY, GPU, k, tp=1)
    m, per_token = 0.4608, 2 * 1152 / 5e5
    assert cost.linear_seconds(5) == pytest.approx(math.hypot(m, 8 * per_token), rel=1e-12)
    assert cost.linear_seconds(6) == pytest.approx(math.hypot(m, 16 * per_token), rel=1e-12)


def test_moe_reads_only_the_experts_its_tokens_touch():
    """4 experts of 2 per token in both layers: 1 token touches 4 (1 - (1 - 1/2)) = 2
    experts, 2 tokens 4 (1 - 1/4) = 3; FLOPs count the 2 active experts always."""
    moe = ModelSpec(name="moe", layers=2, d_model=8, heads=2, kv_heads=1, head_dim=4,
                    intermediate=0, vocab=10, experts=4, experts_per_token=2,
                    expert_intermediate=16, moe_layers=2)
    k = K.replace(gemm_efficiency=1.0)  # compute stays far below the weight read
    cost = CostModel(moe, GPU, k.replace(gemm_sharpness=64.0), tp=1)
    rate = 1e4 * 0.5
    expert_bytes = 3 * 8 * 16 * 2  # one expert's weights, bf16
    fixed = (moe.linear_params * 2 - 2 * 4 * expert_bytes) / rate
    for tokens, touched in ((1, 2.0), (2, 3.0)):
        memory = fixed + 2 * touched * expert_bytes / rate
        compute = 2 * moe.active_linear_params * tokens / 1e6
        blended = (memory ** 64 + compute ** 64) ** (1 / 64)
        assert cost.linear_seconds(tokens) == pytest.approx(blended, rel=1e-9)


def test_breakdown_adds_up_and_series_repeats_decode_seconds():
    """On random shapes: the terms add up to dispatch_seconds, and the folded decode
    series and the inline form of `decode_terms` give exactly decode_seconds' floats,
    dispatch after dispatch."""
    rng = random.Random(7)
    k = K.replace(gemm_sharpness=3.3, gemm_half_tokens=41.0, gemm_tile_tokens=64.0)
    for tp in (1, 2):
        cost = CostModel(TINY, GPU, k, tp=tp)
        for _ in range(200):
            chunks = [(rng.randint(1, 500), rng.randint(0, 3000))
                      for _ in range(rng.randint(0, 3))]
            rows = rng.randint(0 if chunks else 1, 64)
            contexts = sum(rng.randint(1, 4000) for _ in range(rows))
            total = cost.dispatch_seconds(chunks, rows, contexts)
            assert sum(cost.breakdown(chunks, rows, contexts).values()) == pytest.approx(
                total, rel=1e-12)
            series = cost.decode_series(rows, contexts)
            base, kv = cost.decode_terms(rows)
            for step in range(5):
                seconds = cost.decode_seconds(rows, contexts + step * rows)
                assert next(series) == seconds
                assert base + kv * (contexts + (step + 1) * rows) == seconds
