"""Utilisation: the FLOPs and HBM bytes of the dispatches a cost model priced, and
what share of the GPUs' peaks they are (MFU, MBU).

`DispatchWork` turns the shape of a dispatch, as the engine hands it to
`CostModel.dispatch_seconds` (prefill chunks of (tokens, context before),
R decode rows whose contexts sum to X), into FLOPs and bytes over all `tp`
GPUs, from the model's architecture (models.py) alone; no calibration
coefficient enters. With T = R + the chunks' tokens and S = R + chunks (the
rows that sample a token, as the cost model counts them):

- FLOPs = 2 x active linear parameters x T (a multiply and an add per
  weight a token meets: the standard 2 N per token of a forward pass)
  + 2 x vocab x d x S (the LM head) + 4 x heads x head_dim x layers x the
  (query, key) pairs: C X' + C (C + 1) / 2 per chunk of C tokens after X'
  of context, and X + R for the decode rows (each attends its context and
  itself);
- bytes = the weights, read once per dispatch (an MoE layer's experts as
  the cost model counts them: those its T tokens touch, E (1 - (1 -
  k/E)^T)), with the LM head (16-bit) + the KV read (X + R tokens of the
  decode rows, X' of every chunk) + the KV written (T tokens), at the KV
  bytes a token takes on each GPU times tp (a KV head replicated across
  GPUs is read on each). Activations, norms and all-reduces are left out.

Every row the cost model prices counts, recompute and a static batch's
padding rows included: the work the busy time was spent on (the summary
counts recompute tokens and padding rows on lines of their own).

The peaks are the GPU catalogue's (gpus.py) times tp: FLOP/s at the peak
the cost model runs the linear layers at (the FP8 peak for an fp8 model on
a GPU with FP8 tensor cores, else the dense bf16 peak), and HBM bandwidth.
MFU = FLOPs / (seconds x peak FLOP/s), MBU = bytes / (seconds x HBM
bandwidth); per run the seconds are the busy time (the modelled GPU time of
its dispatches, CPU overheads included), not the makespan.

The counts a run accumulates (`WorkCounts`: tokens, sampling rows,
attention pairs, KV tokens read, and dispatches by their token count) are
integers, and a folded stretch of identical decode dispatches adds its
closed form (`WorkCounts.add_decodes`), so a replay stepped or folded gets
the same counts, and so the same FLOPs and bytes to the last bit.
"""
from __future__ import annotations

from typing import Any

from .models import ACTIVATION_BYTES

__all__ = ["DispatchWork", "WorkCounts", "Utilisation"]


class WorkCounts:
    """What a run's dispatches computed, as integer counts (see the module):
    `tokens` (T), `sampled` (S), `pairs` (attention (query, key) pairs),
    `kv_read` (KV tokens read), and `by_tokens`: dispatches by T."""

    __slots__ = ("tokens", "sampled", "pairs", "kv_read", "by_tokens")

    def __init__(self) -> None:
        self.tokens = 0
        self.sampled = 0
        self.pairs = 0
        self.kv_read = 0
        self.by_tokens: dict[int, int] = {}

    def add(self, chunks, rows: int, contexts: int) -> None:
        """One dispatch of prefill `chunks` ((tokens, context before) pairs) and `rows`
        decodes whose contexts sum to `contexts` (`CostModel.dispatch_seconds`'s
        arguments)."""
        tokens = rows
        pairs = read = contexts + rows
        for chunk, before in chunks:
            tokens += chunk
            pairs += chunk * before + chunk * (chunk + 1) // 2
            read += before
        self.tokens += tokens
        self.sampled += rows + len(chunks)
        self.pairs += pairs
        self.kv_read += read
        by_tokens = self.by_tokens
        by_tokens[tokens] = by_tokens.get(tokens, 0) + 1

    def add_decodes(self, count: int, rows: int, contexts: int) -> None:
        """`count` dispatches of `rows` decodes each, whose contexts sum to `contexts`
        in the first and grow by `rows` a dispatch (a folded stretch): the sum of
        `add` over them, in closed form. Dispatch k (from 0) has contexts + k rows
        and reads contexts + (k + 1) rows KV tokens: in all count x contexts +
        rows x count (count + 1) / 2."""
        read = count * contexts + rows * (count * (count + 1) // 2)
        self.tokens += count * rows
        self.sampled += count * rows
        self.pairs += read
        self.kv_read += read
        by_tokens = self.by_tokens
        by_tokens[rows] = by_tokens.get(rows, 0) + count

    def update(self, other: "WorkCounts") -> None:
        """Add `other`'s counts to these."""
        self.tokens += other.tokens
        self.sampled += other.sampled
        self.pairs += other.pairs
        self.kv_read += other.kv_read
        by_tokens = self.by_tokens
        for tokens, count in other.by_tokens.items():
            by_tokens[tokens] = by_tokens.get(tokens, 0) + count

    def as_tuple(self) -> tuple:
        """The counts, comparable (tests)."""
        return (self.tokens, self.sampled, self.pairs, self.kv_read,
                tuple(sorted(self.by_tokens.items())))


class DispatchWork:
    """FLOPs and HBM bytes of dispatches of `model` on `tp` GPUs of `gpu` (see the
    module for the formulas), and those GPUs' peaks."""

    def __init__(self, model: Any, gpu: Any, tp: int = 1) -> None:
        self.model = model
        self.gpu = gpu
        self.tp = tp
        # FLOPs (integers): per token, per sampling row, per (query, key) pair.
        self.flops_per_token = model.linear_flops_per_token
        self.flops_per_row = model.lm_head_flops_per_row
        self.flops_per_pair = model.attention_flops_per_pair_total
        # Bytes: the weights a dispatch reads besides the MoE experts, all the experts'
        # (of which it reads the touched share), and the KV of a token on all GPUs.
        wb = model.weight_bytes_per_param
        head_bytes = ACTIVATION_BYTES if model.fp8 else wb
        self.expert_bytes = model.moe_layers * model.experts * model.expert_params * wb
        self.fixed_bytes = (model.linear_params * wb - self.expert_bytes
                            + model.vocab * model.d_model * head_bytes)
        self._k_over_e = (model.experts_per_token / model.experts) if model.experts else 0.0
        self.kv_bytes_per_token = model.kv_bytes_per_token_per_gpu(tp) * tp
        peak = gpu.bf16_flops
        if model.fp8 and gpu.fp8_flops:
            peak = gpu.fp8_flops  # as the cost model runs an fp8 model's GEMMs
        self.peak_flops = peak * tp
        self.bandwidth = gpu.hbm_bandwidth * tp

    @classmethod
    def of(cls, cost: Any) -> "DispatchWork":
        """The work of what `cost` (a `CostModel`) prices."""
        return cls(cost.model, cost.gpu, cost.tp)

    def weight_bytes(self, tokens: int) -> float:
        """Weight bytes one dispatch of `tokens` tokens reads."""
        if not self.expert_bytes:
            return self.fixed_bytes
        touched = 1.0 - (1.0 - self._k_over_e) ** tokens
        return self.fixed_bytes + self.expert_bytes * touched

    def flops(self, counts: WorkCounts) -> int:
        """The FLOPs of the dispatches `counts` counted (an exact integer)."""
        return (self.flops_per_token * counts.tokens + self.flops_per_row * counts.sampled
                + self.flops_per_pair * counts.pairs)

    def bytes(self, counts: WorkCounts) -> float:
        """The HBM bytes of the dispatches `counts` counted: weights (by token count,
        in ascending order) and KV read and written."""
        weights = 0
        for tokens, count in sorted(counts.by_tokens.items()):
            weights += count * self.weight_bytes(tokens)
        return weights + self.kv_bytes_per_token * (counts.kv_read + counts.tokens)

    def dispatch(self, chunks, rows: int, contexts: int) -> tuple[int, float]:
        """(FLOPs, bytes) of one dispatch, computed directly (the slow way the
        counts must agree with)."""
        counts = WorkCounts()
        counts.add(chunks, rows, contexts)
        return self.flops(counts), self.bytes(counts)


class Utilisation:
    """What a run (or a fleet's replicas together) did against the peaks: FLOPs,
    bytes, and the peak FLOPs and bytes of its busy time (busy seconds x peak,
    added over replicas), from which MFU and MBU follow."""

    __slots__ = ("flops", "bytes", "flop_capacity", "byte_capacity")

    def __init__(self, flops: float = 0, bytes_: float = 0, flop_capacity: float = 0.0,
                 byte_capacity: float = 0.0) -> None:
        self.flops = flops
        self.bytes = bytes_
        self.flop_capacity = flop_capacity
        self.byte_capacity = byte_capacity

    @classmethod
    def of(cls, work: DispatchWork, counts: WorkCounts, busy_seconds: float) -> "Utilisation":
        return cls(work.flops(counts), work.bytes(counts), busy_seconds * work.peak_flops,
                   busy_seconds * work.bandwidth)

    def add(self, other: "Utilisation") -> None:
        self.flops += other.flops
        self.bytes += other.bytes
        self.flop_capacity += other.flop_capacity
        self.byte_capacity += other.byte_capacity

    @property
    def mfu(self) -> float | None:
        """FLOPs over the peak FLOPs of the busy time (None without busy time)."""
        return self.flops / self.flop_capacity if self.flop_capacity else None

    @property
    def mbu(self) -> float | None:
        """Bytes over the HBM bytes the busy time could move (None without busy time)."""
        return self.bytes / self.byte_capacity if self.byte_capacity else None
