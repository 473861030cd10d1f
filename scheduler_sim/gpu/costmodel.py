"""The cost model: how long a dispatch takes on a GPU.

`CostModel` prices a dispatch as a sum of physical terms (§9; the class
docstring gives each): the FLOPs and bytes come from the model's
architecture (models.py) and the GPU's datasheet (gpus.py); how close to
the peaks each kind of kernel gets, and the fixed costs around them, are
the coefficients of a calibration (coefficients.py, calibration.py).

With tensor parallelism over `tp` GPUs each GPU holds 1/tp of the weights
and of every token's KV (KV heads replicated when tp exceeds them) and does
1/tp of the FLOPs, and every layer adds two all-reduces.

The cost model and the clock a run's options ask for are `run_cost`'s
(`cost_model_for`, `clock_for`); the KV pool a GPU's memory holds is
`kv_pool`'s (`size_pool`, `fit_pool`); swap against recompute is `swap`'s.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from itertools import count, repeat
from operator import add, mul

from .coefficients import DEFAULTS, Coefficients
from .models import ACTIVATION_BYTES

__all__ = ["CostModel", "DispatchShape", "mlp_width"]


@dataclasses.dataclass
class DispatchShape:
    """What a dispatch computes: prefill chunks (tokens, context before) and decode
    rows (context before each)."""

    chunks: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    decodes: list[int] = dataclasses.field(default_factory=list)


class CostModel:
    """Seconds per dispatch for one model on `tp` GPUs of one kind (§9).

    A dispatch is priced as a sum of terms, each over all layers of the
    model on one of the `tp` GPUs (`breakdown` gives them by name):

    - `linear`: the attention projections and the MLP of every layer, a
      GEMM of T tokens (T = prefill tokens + decode rows) against the
      layer's weights. Memory time m = weight bytes read / (HBM x
      gemm_bandwidth_efficiency); compute time c = 2 x active linear
      parameters x ceil((T + Th) / tile) x tile / (peak x gemm_efficiency);
      the two blend as (m^p + c^p)^(1/p), rising smoothly from the weight
      read to compute (p = gemm_sharpness, Th = gemm_half_tokens, tile =
      gemm_tile_tokens: a GEMM computes whole tiles of rows). An MoE layer reads only
      the experts its T tokens touch: E (1 - (1 - k/E)^T) of E.
    - `lm_head`: the same blend for the vocabulary projection of the rows
      that sample (one per decode row and per prefill chunk), in 16 bits at
      the 16-bit peak even for fp8 weights; the embedding table is a lookup,
      not read whole.
    - `attention_prefill`: per chunk of C tokens after X of context, 4 x
      heads x head_dim x (C X + C (C + 1) / 2) FLOPs per layer at peak x
      attention_efficiency x C / (C + Ch), Ch = attention_half_tokens.
    - `attention_decode`: the KV every decode row reads (its context and
      itself) at HBM x kv_read_efficiency.
    - `kv_write`: the KV of the T new tokens at HBM x kv_read_efficiency.
    - `elementwise`: norms, activation, rotary, residual adds: per token per
      layer 2 bytes x (8 d + (3 I + 2 (heads + kv_heads) head_dim) / tp) at
      HBM x elementwise_efficiency.
    - `floors`: layers x (layer_floor, + decode_attention_floor when the
      dispatch decodes, + prefill_attention_floor when it prefills).
    - `allreduce` (tp > 1): 2 per layer, each allreduce_latency + 2 (tp -
      1) / tp x T x d x 2 bytes / (link x interconnect_efficiency).
    - `step`: step_overhead + row_overhead x rows (CPU).

    Decode rows enter only through their count and the sum of their
    contexts, which is what the engine asks (`dispatch_seconds`).
    `request_overhead` is not a dispatch term: the summary adds it to each
    request's TTFT and end-to-end latency.
    """

    def __init__(self, model, gpu, coefficients: Coefficients = DEFAULTS, tp: int = 1) -> None:
        self.model = model
        self.gpu = gpu
        self.tp = tp
        self.coefficients = k = coefficients
        wb = model.weight_bytes_per_param
        peak = gpu.bf16_flops
        if model.fp8 and gpu.fp8_flops:
            peak = gpu.fp8_flops  # fp8 weights run the GEMMs at the FP8 peak
        self.gemm_peak = peak
        layers = model.layers
        self._p = k.gemm_sharpness
        self._t0 = k.gemm_half_tokens
        self._tile = k.gemm_tile_tokens
        gemm_flops = peak * k.gemm_efficiency
        weight_rate = gpu.hbm_bandwidth * k.gemm_bandwidth_efficiency
        # Linear layers: seconds of compute per token, and of weight reading, per GPU.
        self._lin_c = 2 * model.active_linear_params / tp / gemm_flops
        expert_bytes = model.moe_layers * model.experts * model.expert_params * wb / tp
        self._lin_m_fixed = (model.linear_params * wb / tp - expert_bytes) / weight_rate
        self._experts = model.experts
        self._k_over_e = (model.experts_per_token / model.experts) if model.experts else 0.0
        self._expert_m = (expert_bytes / model.experts / weight_rate) if model.experts else 0.0
        # The LM head, by sampled row: 16-bit even in an fp8 checkpoint (vLLM quantises
        # the linear layers only; ModelSpec.weight_bytes counts it so), at the 16-bit peak.
        head_bytes = ACTIVATION_BYTES if model.fp8 else wb
        self._head_c = (2 * model.vocab * model.d_model / tp
                        / (gpu.bf16_flops * k.gemm_efficiency))
        self._head_m = model.vocab * model.d_model * head_bytes / tp / weight_rate
        # Prefill attention: seconds per (query, key) pair over all layers (16-bit, also
        # for fp8 weights).
        self._pair = (model.attention_flops_per_pair_total / tp
                      / (gpu.bf16_flops * k.attention_efficiency))
        self._c0 = k.attention_half_tokens
        kv_rate = gpu.hbm_bandwidth * k.kv_read_efficiency
        self._kv = model.kv_bytes_per_token_per_gpu(tp) / kv_rate  # seconds per token of KV
        width = mlp_width(model)
        self._elementwise = (layers * ACTIVATION_BYTES * (8 * model.d_model + (3 * width + 2 * (
            model.heads + model.kv_heads) * model.head_dim) / tp)
            / (gpu.hbm_bandwidth * k.elementwise_efficiency))
        self._floor = layers * k.layer_floor
        self._decode_floor = layers * k.decode_attention_floor
        self._prefill_floor = layers * k.prefill_attention_floor
        if tp > 1:
            self._ar_fixed = 2 * layers * k.allreduce_latency
            self._ar_token = (2 * layers * 2 * (tp - 1) / tp * model.d_model * ACTIVATION_BYTES
                              / (gpu.interconnect * k.interconnect_efficiency))
        else:
            self._ar_fixed = self._ar_token = 0.0
        self._step = k.step_overhead
        self._row = k.row_overhead
        self.request_overhead = k.request_overhead
        self._decode_fixed: dict[int, float] = {}

    # --- the terms --------------------------------------------------------------

    def _blend(self, memory: float, compute: float) -> float:
        """(m^p + c^p)^(1/p): the smooth roofline of one GEMM."""
        p = self._p
        if p == 2.0:
            return math.sqrt(memory * memory + compute * compute)
        return (memory ** p + compute ** p) ** (1.0 / p)

    def _gemm_tokens(self, tokens: int) -> float:
        """The tokens a GEMM computes for `tokens`: plus Th, rounded up to whole tiles."""
        tile = self._tile
        padded = tokens + self._t0
        if tile > 1.0:
            padded = math.ceil(padded / tile) * tile
        return padded

    def _linear(self, tokens: int) -> float:
        memory = self._lin_m_fixed
        if self._experts:
            memory += self._expert_m * self._experts * (1.0 - (1.0 - self._k_over_e) ** tokens)
        return self._blend(memory, self._lin_c * self._gemm_tokens(tokens))

    def _head(self, sampled: int) -> float:
        return self._blend(self._head_m, self._head_c * self._gemm_tokens(sampled))

    def _fixed(self, tokens: int, sampled: int, rows: int) -> float:
        """Every term but the attention: what depends only on the counts."""
        p = self._p
        if p != 2.0 and not self._experts:
            # `_linear` and `_head` inlined (`_blend`'s p-norm, `_gemm_tokens`): the
            # same floats, six calls fewer. Speed: every dispatch with prompt rows
            # is priced here, once per arrival on the Azure trace (18,000).
            tile = self._tile
            padded, padded_sampled = tokens + self._t0, sampled + self._t0
            if tile > 1.0:
                padded = math.ceil(padded / tile) * tile
                padded_sampled = math.ceil(padded_sampled / tile) * tile
            linear = (self._lin_m_fixed ** p + (self._lin_c * padded) ** p) ** (1.0 / p)
            head = (self._head_m ** p + (self._head_c * padded_sampled) ** p) ** (1.0 / p)
        else:
            linear = self._linear(tokens)
            head = self._head(sampled)
        return (linear + head + self._kv * tokens
                + self._elementwise * tokens + self._floor
                + self._ar_fixed + self._ar_token * tokens + self._step + self._row * rows)

    def _prefill_attention(self, chunks) -> float:
        pair = self._pair
        c0 = self._c0
        total = 0.0
        for chunk, context in chunks:
            pairs = chunk * context + chunk * (chunk + 1) / 2
            total += pair * pairs * (chunk + c0) / chunk
        return total

    # --- what the engine asks ------------------------------------------------------

    def dispatch_seconds(self, chunks, rows: int, contexts: int) -> float:
        """Seconds of prefill `chunks` ((tokens, context before) pairs) and `rows`
        decodes whose contexts sum to `contexts`."""
        if not chunks:
            return self.decode_seconds(rows, contexts)
        tokens = rows
        for chunk, _ in chunks:
            tokens += chunk
        seconds = (self._fixed(tokens, rows + len(chunks), rows + len(chunks))
                   + self._prefill_attention(chunks) + self._prefill_floor)
        if rows:
            seconds += self._decode_floor + self._kv * (contexts + rows)
        return seconds

    def _decode_base(self, rows: int) -> float:
        """The part of a decode dispatch of `rows` rows that does not depend on their
        contexts (cached: decoding batches repeat their sizes)."""
        base = self._decode_fixed.get(rows)
        if base is None:
            base = self._fixed(rows, rows, rows) + (self._decode_floor if rows else 0.0)
            if len(self._decode_fixed) < 4096:
                self._decode_fixed[rows] = base
        return base

    def decode_seconds(self, rows: int, contexts: int) -> float:
        """`dispatch_seconds` of `rows` decodes whose contexts sum to `contexts`."""
        # (`_decode_base`'s cache read inline, here and in `decode_terms`: the
        # batch sizes repeat. Speed: one call fewer for each of the 64,000 counted
        # starts and folds on the Azure conversation trace; benchmarks/README.md,
        # "eleventh steps", helper az7.)
        base = self._decode_fixed.get(rows)
        if base is None:
            base = self._decode_base(rows)
        return base + self._kv * (contexts + rows)

    def decode_terms(self, rows: int) -> tuple[float, float]:
        """(base, kv): `decode_seconds(rows, contexts)` is `base + kv * (contexts + rows)`,
        the same float (for a loop that prices one dispatch after another inline:
        engine/stretch_timing.py)."""
        base = self._decode_fixed.get(rows)
        if base is None:
            base = self._decode_base(rows)
        return base, self._kv

    def decode_series(self, rows: int, contexts: int) -> Iterator[float]:
        """`decode_seconds(rows, contexts + k * rows)` for k = 0, 1, 2, ...: the
        dispatches of a steady stretch, in which each of `rows` decodes adds one
        token to its context per dispatch (the same floats as `decode_seconds`,
        without a call each; made in C, since a fleet's replicas fold millions of
        dispatches: about 4% of the Mooncake trace over 64 replicas as a generator)."""
        return map(add, repeat(self._decode_base(rows)),
                   map(mul, repeat(self._kv), count(contexts + rows, rows)))

    def breakdown(self, chunks, rows: int, contexts: int) -> dict[str, float]:
        """`dispatch_seconds` term by term (seconds; see the class docstring); the
        terms add up to it (within float rounding)."""
        chunks = list(chunks)
        tokens = rows + sum(chunk for chunk, _ in chunks)
        sampled = rows + len(chunks)
        floors = self._floor
        if chunks:
            floors += self._prefill_floor
        if rows:
            floors += self._decode_floor
        return {
            "linear": self._linear(tokens),
            "lm_head": self._head(sampled),
            "attention_prefill": self._prefill_attention(chunks),
            "attention_decode": self._kv * (contexts + rows) if rows else 0.0,
            "kv_write": self._kv * tokens,
            "elementwise": self._elementwise * tokens,
            "floors": floors,
            "allreduce": self._ar_fixed + self._ar_token * tokens,
            "step": self._step + self._row * sampled,
        }

    # --- single kernels, for comparing with profiles (profiles.py) -------------------

    def linear_seconds(self, tokens: int) -> float:
        """The `linear` term of a dispatch of `tokens` tokens."""
        return self._linear(tokens)

    def elementwise_seconds(self, tokens: int) -> float:
        """The `elementwise` term of `tokens` tokens."""
        return self._elementwise * tokens

    def layer_floor_seconds(self) -> float:
        """layers x layer_floor."""
        return self._floor

    def prefill_attention_seconds(self, chunk: int, context: int) -> float:
        """Prefill attention of one chunk after `context` tokens, with its floor."""
        return self._prefill_attention([(chunk, context)]) + self._prefill_floor

    def decode_attention_seconds(self, rows: int, contexts: int) -> float:
        """Decode attention of `rows` rows whose contexts sum to `contexts`, with its
        floor."""
        return self._kv * (contexts + rows) + self._decode_floor

    def seconds(self, shape: "DispatchShape") -> float:
        """`dispatch_seconds` of a `DispatchShape`."""
        return self.dispatch_seconds(shape.chunks, len(shape.decodes), sum(shape.decodes))


def mlp_width(model) -> float:
    """The MLP's intermediate width a token passes through, averaged over the layers:
    `intermediate` in a dense layer; in an MoE layer, that of the experts it is
    routed to and of the shared experts."""
    moe = (model.experts_per_token * model.expert_intermediate
           + model.shared_experts * model.shared_expert_intermediate)
    dense_layers = model.layers - model.moe_layers
    return (dense_layers * model.intermediate + model.moe_layers * moe) / model.layers
