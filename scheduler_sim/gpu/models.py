"""A model's architecture as the cost model counts it: parameters, FLOPs and bytes.

`ModelSpec` holds the numbers of a decoder-only transformer that a Hugging
Face config.json gives (`ModelSpec.from_config`, gpu/hfconfig.py), and
derives from them what the cost model prices: parameters per layer and in
all, the FLOPs of the linear layers per token and of attention per (query,
key) pair, the bytes of the weights and of a token's KV.

What is counted: the attention projections, the MLP (dense, or an MoE
layer's routed experts, shared experts and router), the embedding table, the
LM head (once when tied) and the RMSNorm weights, 2 d per layer plus the
final d. Left out, each under 0.01% of any catalogued model: biases (Qwen2's
QKV bias), the per-head QK norms (Qwen3), the latent norms of MLA and the
indexer's norm, Qwen2-MoE's one-output shared-expert gate. Multi-token
prediction layers and vision towers are not part of the served text model.

An MoE layer's FLOPs come from the experts a token is routed to
(`experts_per_token` plus the shared ones); its weight bytes from all of
them. The experts are taken to be split across tensor-parallel GPUs like
every other weight (vLLM's default; expert parallelism is not modelled).
"""
from __future__ import annotations

from typing import Any

from ..records.frozen import Frozen, record

__all__ = ["ModelSpec", "MlaSpec", "ACTIVATION_BYTES"]

# Bytes of an activation, and of every weight an fp8 checkpoint keeps outside its
# linear layers (embedding table, LM head, norms): bf16.
ACTIVATION_BYTES = 2


@record  # a frozen dataclass, its methods written once (records/frozen.py)
class MlaSpec(Frozen):
    """Multi-head latent attention (DeepSeek-V2/V3, GLM-5): queries and keys/values go
    through low-rank projections and the cache keeps one latent per token.

    `q_lora_rank` 0 means queries are projected directly from the hidden state. The
    `index_*` numbers are DeepSeek sparse attention's lightning indexer (GLM-5,
    DeepSeek-V3.2), 0 without one.
    """

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    index_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0


@record  # a frozen dataclass, its methods written once (records/frozen.py)
class ModelSpec(Frozen):
    """A decoder's architecture numbers, as its config.json gives them (see the module
    docstring for what is counted). Every derived member is exact integer arithmetic
    on these fields; its docstring gives the formula (d = d_model, hd = head_dim)."""

    name: str
    layers: int
    d_model: int              # hidden_size
    heads: int                # num_attention_heads
    kv_heads: int             # num_key_value_heads (= heads when absent)
    head_dim: int             # head_dim, else hidden_size // heads
    intermediate: int         # dense MLP width (intermediate_size); 0 when no layer is dense
    vocab: int
    tied_embeddings: bool = False
    gated_mlp: bool = True    # SwiGLU-style: gate, up, down (3 matrices); else up, down (2)
    experts: int = 0          # routed experts per MoE layer; 0 = dense model
    experts_per_token: int = 0
    shared_experts: int = 0
    expert_intermediate: int = 0
    shared_expert_intermediate: int = 0
    moe_layers: int = 0       # how many of the layers have an MoE MLP (the rest dense)
    weight_bytes_per_param: float = 2.0   # bf16/fp16 2, fp8 1
    kv_dtype_bytes: float = 2.0
    fp8: bool = False         # weights in fp8: linear layers may run at the GPU's FP8 peak
    kv_width: int = 0         # elements of K and V one token keeps per layer; 0 = 2 * kv_heads * head_dim
    source: str = ""          # where the config came from
    mla: MlaSpec | None = None  # multi-head latent attention's projections, else None

    @classmethod
    def from_config(cls, config: dict[str, Any], name: str, where: str) -> "ModelSpec":
        """The spec a Hugging Face config.json describes (gpu/hfconfig.py); ConfigError
        listing every problem, each naming `where` and the field."""
        from .hfconfig import spec_from_config
        return spec_from_config(config, name, where)

    # --- parameters -----------------------------------------------------------------

    @property
    def attention_params_per_layer(self) -> int:
        """d hd heads (Q) + 2 d hd kv_heads (K, V) + heads hd d (O). With MLA: Q (d x
        heads (nope + rope), or d x q_lora + q_lora x heads (nope + rope)), the joint
        KV down-projection d (kv_lora + rope), its up-projection kv_lora heads (nope +
        v), O heads v d, and the indexer's q_lora (or d) x index_heads index_hd + d
        index_hd + d index_heads."""
        d, mla = self.d_model, self.mla
        if mla is None:
            return (d * self.heads * self.head_dim + 2 * d * self.kv_heads * self.head_dim
                    + self.heads * self.head_dim * d)
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        q = (d * self.heads * qk if not mla.q_lora_rank
             else d * mla.q_lora_rank + mla.q_lora_rank * self.heads * qk)
        kv = (d * (mla.kv_lora_rank + mla.qk_rope_head_dim)
              + mla.kv_lora_rank * self.heads * (mla.qk_nope_head_dim + mla.v_head_dim))
        out = self.heads * mla.v_head_dim * d
        index = ((mla.q_lora_rank or d) * mla.index_heads * mla.index_head_dim
                 + d * mla.index_head_dim + d * mla.index_heads)
        return q + kv + out + index

    @property
    def _mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    @property
    def dense_mlp_params(self) -> int:
        """One dense layer's MLP: 3 d intermediate (gated), else 2 d intermediate."""
        return self._mlp_matrices * self.d_model * self.intermediate

    @property
    def expert_params(self) -> int:
        """One routed expert: 3 d expert_intermediate (gated), else 2 d expert_intermediate."""
        return self._mlp_matrices * self.d_model * self.expert_intermediate

    @property
    def shared_expert_params(self) -> int:
        """One shared expert: 3 d shared_expert_intermediate (gated), else 2 d x that."""
        return self._mlp_matrices * self.d_model * self.shared_expert_intermediate

    @property
    def router_params(self) -> int:
        """One MoE layer's router: d experts."""
        return self.d_model * self.experts

    @property
    def moe_mlp_params(self) -> int:
        """One MoE layer's MLP: experts x expert_params + shared_experts x
        shared_expert_params + the router, d experts."""
        return (self.experts * self.expert_params
                + self.shared_experts * self.shared_expert_params + self.router_params)

    @property
    def moe_active_mlp_params(self) -> int:
        """What one token of an MoE layer runs through: experts_per_token x expert_params
        + shared_experts x shared_expert_params + the router."""
        return (self.experts_per_token * self.expert_params
                + self.shared_experts * self.shared_expert_params + self.router_params)

    @property
    def dense_layers(self) -> int:
        """Layers whose MLP is dense: layers - moe_layers."""
        return self.layers - self.moe_layers

    @property
    def linear_params(self) -> int:
        """Every layer's attention and MLP weights (no embeddings, no norms): layers x
        attention + dense_layers x dense_mlp + moe_layers x moe_mlp."""
        return (self.layers * self.attention_params_per_layer
                + self.dense_layers * self.dense_mlp_params
                + self.moe_layers * self.moe_mlp_params)

    @property
    def active_linear_params(self) -> int:
        """The linear weights one token runs through: as `linear_params`, with an MoE
        layer's `moe_active_mlp_params` in place of all its experts."""
        return (self.layers * self.attention_params_per_layer
                + self.dense_layers * self.dense_mlp_params
                + self.moe_layers * self.moe_active_mlp_params)

    @property
    def embedding_params(self) -> int:
        """The input embedding table: vocab d."""
        return self.vocab * self.d_model

    @property
    def lm_head_params(self) -> int:
        """The output projection: vocab d (the embedding table itself when tied)."""
        return self.vocab * self.d_model

    @property
    def norm_params(self) -> int:
        """RMSNorm weights: 2 d per layer (before attention, before the MLP) + d (final)."""
        return 2 * self.d_model * self.layers + self.d_model

    @property
    def parameters(self) -> int:
        """All parameters: linear + embedding + LM head (not when tied: one table) + norms."""
        head = 0 if self.tied_embeddings else self.lm_head_params
        return self.linear_params + self.embedding_params + head + self.norm_params

    @property
    def active_parameters(self) -> int:
        """The parameters one token touches: `parameters` with the MoE layers' idle
        experts left out (active_linear in place of linear)."""
        return self.parameters - self.linear_params + self.active_linear_params

    # --- bytes and FLOPs ------------------------------------------------------------

    @property
    def weight_bytes(self) -> float:
        """What the weights take in GPU memory: linear_params x weight_bytes_per_param +
        the rest (embedding, LM head, norms) x 2 for an fp8 model (its checkpoint keeps
        them in bf16, and vLLM quantises linear layers only), else x
        weight_bytes_per_param: parameters x weight_bytes_per_param for a 16-bit model."""
        rest = self.parameters - self.linear_params
        rest_bytes = ACTIVATION_BYTES if self.fp8 else self.weight_bytes_per_param
        return _whole(self.linear_params * self.weight_bytes_per_param + rest * rest_bytes)

    @property
    def linear_flops_per_token(self) -> int:
        """2 x active_linear_params: a multiply and an add per weight a token meets (the
        LM head apart, `lm_head_flops_per_row`)."""
        return 2 * self.active_linear_params

    @property
    def lm_head_flops_per_row(self) -> int:
        """2 vocab d: the logits of one row (a decode, or a prefill's last token)."""
        return 2 * self.vocab * self.d_model

    @property
    def attention_flops_per_pair(self) -> int:
        """FLOPs of one (query, key) pair in one layer: 2 heads hd for Q K^T plus 2 heads
        hd for P V, 4 heads hd. With MLA (prefill's form): 2 heads (nope + rope) + 2
        heads v, plus the indexer's 2 index_heads index_hd."""
        mla = self.mla
        if mla is None:
            return 4 * self.heads * self.head_dim
        return (2 * self.heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim)
                + 2 * mla.index_heads * mla.index_head_dim)

    @property
    def attention_flops_per_pair_total(self) -> int:
        """layers x attention_flops_per_pair: one (query, key) pair through every layer."""
        return self.layers * self.attention_flops_per_pair

    @property
    def kv_token_width(self) -> int:
        """Elements of K and V one token keeps per layer: kv_width when set (MLA's latent,
        kv_lora_rank + qk_rope_head_dim), else 2 kv_heads hd."""
        return self.kv_width or 2 * self.kv_heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> float:
        """Bytes of K and V one token keeps in the cache, over all layers: layers x
        kv_token_width x kv_dtype_bytes."""
        return _whole(self.layers * self.kv_token_width * self.kv_dtype_bytes)

    def kv_bytes_per_token_per_gpu(self, tp: int) -> float:
        """KV bytes of one token on each of `tp` GPUs: the KV heads split across them, a
        head replicated when there are more GPUs than KV heads (max(1, kv_heads // tp)
        heads each, as vLLM does); MLA's latent (kv_width) is kept whole on every GPU."""
        if self.kv_width:
            return self.kv_bytes_per_token
        heads = max(1, self.kv_heads // tp)
        return _whole(self.layers * 2 * heads * self.head_dim * self.kv_dtype_bytes)

    def prefill_flops(self, tokens: int, context: int = 0) -> float:
        """FLOPs to prefill `tokens` tokens after `context` cached ones (the LM head
        apart): linear_flops_per_token x tokens + attention_flops_per_pair_total x the
        causal pairs, token i of the chunk (from 0) attending to context + i + 1 keys:
        tokens x context + tokens (tokens + 1) / 2."""
        pairs = tokens * context + tokens * (tokens + 1) // 2
        return self.linear_flops_per_token * tokens + self.attention_flops_per_pair_total * pairs


def _whole(value: float) -> float:
    """An integral byte count as an int (so that it prints as one), else the float."""
    return int(value) if float(value).is_integer() else value
