"""Reading a Hugging Face config.json into a `ModelSpec` (README "Models and GPUs").

The fields read, by family (the first present of each list wins):

- every model: `num_hidden_layers` (`num_layers`), `hidden_size`,
  `num_attention_heads`, `num_key_value_heads` (`multi_query_group_num`;
  default: the heads), `head_dim` (`kv_channels`; default hidden_size /
  heads), `intermediate_size` (`ffn_hidden_size`), `vocab_size`
  (`padded_vocab_size`), `tie_word_embeddings` (default false), `hidden_act`,
  `torch_dtype` or `dtype`, `quantization_config`, `model_type`;
- a multimodal wrapper (Llama-4): the text model's fields in `text_config`,
  the dtype, quantisation and tying falling back to the top level;
- MoE: `num_local_experts` (Mixtral, Llama-4), `num_experts` (Qwen-MoE) or
  `n_routed_experts` (DeepSeek, GLM); `num_experts_per_tok`;
  `moe_intermediate_size` (else `intermediate_size`); shared experts from
  `n_shared_experts` (of `moe_intermediate_size` each),
  `shared_expert_intermediate_size` (Qwen2-MoE, one) or Llama-4's one of
  `intermediate_size`; which layers are MoE from `first_k_dense_replace` and
  `moe_layer_freq` (DeepSeek, GLM), `decoder_sparse_step` and
  `mlp_only_layers` (Qwen-MoE), `moe_layers` or `interleave_moe_layer_step`
  (Llama-4, whose dense layers are `intermediate_size_mlp` wide), else all;
- MLA (DeepSeek-V2/V3, GLM-5): `kv_lora_rank`, `q_lora_rank`,
  `qk_nope_head_dim`, `qk_rope_head_dim`, `v_head_dim`, and the sparse
  attention indexer's `index_n_heads`, `index_head_dim`, `index_topk`.

Weights and KV are 2 bytes (a float32 checkpoint is served in 16 bits, as
vLLM's `auto` dtype does); fp8 weights (`quant_method` fp8 or fbgemm_fp8,
compressed-tensors with 8-bit float weights, modelopt FP8) are 1 byte, and
compressed-tensors' 8-bit float `kv_cache_scheme` makes the KV 1 byte. Other
quantisations are refused. The MLP is gated (three matrices) except for the
model types in `NON_GATED`: the activation does not say (SwiGLU uses silu,
Gemma's GeGLU gelu, GPT-NeoX's plain MLP gelu too), so `hidden_act` is only
checked to be a string.
"""
from __future__ import annotations

from typing import Any

from ..records.errors import ConfigError
from ..records.option_values import show
from .models import MlaSpec, ModelSpec

__all__ = ["spec_from_config", "LIMITS", "NON_GATED", "SIXTEEN_BIT_DTYPES"]

# The largest value each count may take: far beyond any real model, small enough that
# no figure derived from them is absurd.
LIMITS = {"layers": 10_000, "width": 1_000_000, "heads": 100_000, "mlp": 10_000_000,
          "vocab": 100_000_000, "experts": 100_000, "shared": 1_000}

NON_GATED = ("gpt2", "gpt_bigcode", "gpt_neox", "gptj", "opt", "phi", "falcon", "starcoder2")
SIXTEEN_BIT_DTYPES = ("bfloat16", "float16", "float32", "bf16", "fp16", "half", "float")
FP8_METHODS = ("fp8", "fbgemm_fp8")


class _Fields:
    """Typed reads of a config's fields, every problem kept as `WHERE: field 'K': ...`."""

    def __init__(self, where: str, arch: dict[str, Any], top: dict[str, Any],
                 prefix: str) -> None:
        self.where = where
        self.arch = arch      # the text model's fields (text_config, or the config)
        self.top = top        # the whole config, for what a wrapper keeps at its top
        self.prefix = prefix  # "text_config." when arch is nested
        self.problems: list[str] = []

    def fail(self, key: str, text: str, value: Any = None, shown: bool = True) -> None:
        got = f", got {show(value)}" if shown else ""
        self.problems.append(f"{self.where}: field '{key}': {text}{got}")

    def find(self, *keys: str, fallback: bool = False) -> tuple[str | None, Any]:
        """(the name as messages give it, value) of the first key present and not null
        in the text model's fields (then at the top when `fallback`), else (None, None)."""
        for key in keys:
            if self.arch.get(key) is not None:
                return self.prefix + key, self.arch[key]
        if fallback and self.prefix:
            for key in keys:
                if self.top.get(key) is not None:
                    return key, self.top[key]
        return None, None

    def integer(self, *keys: str, minimum: int = 1, maximum: int, default: int | None = None
                ) -> int | None:
        """The integer the first present key holds, from `minimum` to `maximum`; missing
        is a problem unless there is a default; None after a problem."""
        key, value = self.find(*keys)
        wanted = f"an integer from {minimum} to {maximum:,}"
        if key is None:
            if default is None:
                self.fail(self.prefix + keys[0], f"missing ({wanted} is required)", shown=False)
            return default
        if (not isinstance(value, int) or isinstance(value, bool)
                or not minimum <= value <= maximum):
            self.fail(key, f"must be {wanted}", value)
            return None
        return value

    def flag(self, key: str, default: bool) -> bool:
        name, value = self.find(key, fallback=True)
        if name is None:
            return default
        if not isinstance(value, bool):
            self.fail(name, "must be true or false", value)
            return default
        return value

    def text(self, *keys: str, fallback: bool = False) -> tuple[str | None, str | None]:
        name, value = self.find(*keys, fallback=fallback)
        if name is not None and not isinstance(value, str):
            self.fail(name, "must be a string", value)
            return name, None
        return name, value


def spec_from_config(config: Any, name: str, where: str) -> ModelSpec:
    """The `ModelSpec` named `name` that `config` (a parsed config.json) describes;
    ConfigError listing every problem, each `WHERE: field 'K': what is wrong, got what`."""
    if not isinstance(config, dict):
        raise ConfigError([f"{where}: a config.json holds a JSON object, got {show(config)}"])
    nested = config.get("text_config")
    if nested is not None and not isinstance(nested, dict):
        raise ConfigError([f"{where}: field 'text_config': must be an object, got "
                           f"{show(nested)}"])
    f = _Fields(where, nested or config, config, "text_config." if nested else "")
    if config.get("is_encoder_decoder") is True:
        f.fail("is_encoder_decoder", "an encoder-decoder model is not modelled (a decoder "
               "is)", True)
    _, model_type = f.text("model_type", fallback=True)
    f.text("hidden_act")
    layers = f.integer("num_hidden_layers", "num_layers", maximum=LIMITS["layers"])
    d = f.integer("hidden_size", maximum=LIMITS["width"])
    heads = f.integer("num_attention_heads", maximum=LIMITS["heads"])
    kv_heads = f.integer("num_key_value_heads", "multi_query_group_num",
                         maximum=LIMITS["heads"], default=heads or 1)
    if heads and kv_heads and heads % kv_heads:
        f.fail(f.prefix + "num_key_value_heads", f"must divide the {heads} attention heads",
               kv_heads)
    vocab = f.integer("vocab_size", "padded_vocab_size", maximum=LIMITS["vocab"])
    mla = _mla(f)
    if mla is not None:
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        kv_width = mla.kv_lora_rank + mla.qk_rope_head_dim
    else:
        kv_width = 0
        head_dim = f.integer("head_dim", "kv_channels", maximum=LIMITS["width"], default=0)
        if not head_dim and d and heads:
            if d % heads:
                f.fail(f.prefix + "head_dim", f"missing, and hidden_size {d} is not a whole "
                       f"number of heads ({heads})", shown=False)
            head_dim = d // heads
    moe = _moe(f, layers or 0, (model_type or "").startswith("llama4"))
    weight_bytes, fp8, kv_bytes = _dtypes(f)
    tied = f.flag("tie_word_embeddings", False)
    if f.problems:
        raise ConfigError(f.problems)
    assert layers and d and heads and kv_heads and vocab and head_dim  # checked above
    return ModelSpec(name, layers, d, heads, kv_heads, head_dim, moe["intermediate"], vocab,
                     tied_embeddings=tied, gated_mlp=model_type not in NON_GATED,
                     experts=moe["experts"], experts_per_token=moe["per_token"],
                     shared_experts=moe["shared"], expert_intermediate=moe["expert"],
                     shared_expert_intermediate=moe["shared_width"],
                     moe_layers=moe["moe_layers"], weight_bytes_per_param=weight_bytes,
                     kv_dtype_bytes=kv_bytes, fp8=fp8, kv_width=kv_width, source=where,
                     mla=mla)


def _mla(f: _Fields) -> MlaSpec | None:
    """MLA's projections when the config has `kv_lora_rank`, else None."""
    if f.find("kv_lora_rank")[0] is None:
        return None
    width = LIMITS["width"]
    numbers = [f.integer("kv_lora_rank", maximum=width),
               f.integer("q_lora_rank", minimum=0, maximum=width, default=0),
               f.integer("qk_nope_head_dim", minimum=0, maximum=width),
               f.integer("qk_rope_head_dim", minimum=0, maximum=width),
               f.integer("v_head_dim", maximum=width),
               f.integer("index_n_heads", minimum=0, maximum=LIMITS["heads"], default=0),
               f.integer("index_head_dim", minimum=0, maximum=width, default=0),
               f.integer("index_topk", minimum=0, maximum=10 ** 9, default=0)]
    if any(n is None for n in numbers):
        return None
    kv, q, nope, rope, v, index_heads, index_dim, topk = numbers
    return MlaSpec(q, kv, nope, rope, v, index_heads, index_dim, topk)


def _moe(f: _Fields, layers: int, llama4: bool) -> dict[str, int]:
    """Experts, experts per token, shared experts and their widths, how many layers are
    MoE, and the dense MLP width (0 when no layer is dense)."""
    out = {"experts": 0, "per_token": 0, "shared": 0, "expert": 0, "shared_width": 0,
           "moe_layers": 0, "intermediate": 0}
    experts = f.integer("num_local_experts", "num_experts", "n_routed_experts", minimum=0,
                        maximum=LIMITS["experts"], default=0)
    mlp = LIMITS["mlp"]
    if not experts:
        out["intermediate"] = f.integer("intermediate_size", "ffn_hidden_size",
                                        maximum=mlp) or 0
        return out
    out["experts"] = experts
    out["per_token"] = f.integer("num_experts_per_tok", maximum=experts) or 0
    expert = f.integer("moe_intermediate_size", "intermediate_size", maximum=mlp) or 0
    out["expert"] = expert
    if f.find("n_shared_experts")[0] is not None:
        out["shared"] = f.integer("n_shared_experts", minimum=0,
                                  maximum=LIMITS["shared"]) or 0
        out["shared_width"] = expert
    elif f.find("shared_expert_intermediate_size")[0] is not None:
        width = f.integer("shared_expert_intermediate_size", minimum=0, maximum=mlp) or 0
        out["shared"], out["shared_width"] = (1, width) if width else (0, 0)
    elif llama4:  # Llama4TextMoe: one shared expert as wide as a routed one
        out["shared"], out["shared_width"] = 1, expert
    moe_layers = _moe_layer_count(f, layers, llama4)
    out["moe_layers"] = moe_layers
    if moe_layers < layers:
        keys = ("intermediate_size_mlp", "intermediate_size") if llama4 else (
            "intermediate_size", "ffn_hidden_size")
        out["intermediate"] = f.integer(*keys, maximum=mlp) or 0
    return out


def _moe_layer_count(f: _Fields, layers: int, llama4: bool) -> int:
    """How many of `layers` have an MoE MLP, by the family's own rule."""
    if llama4:
        key, listed = f.find("moe_layers")
        if key is not None:
            if (not isinstance(listed, list) or len(set(map(repr, listed))) != len(listed)
                    or not all(isinstance(i, int) and not isinstance(i, bool)
                               and 0 <= i < layers for i in listed)):
                f.fail(key, f"must be a list of distinct layer numbers from 0 to "
                       f"{layers - 1}", listed)
                return layers
            return len(listed)
        step = f.integer("interleave_moe_layer_step", maximum=max(layers, 1), default=1) or 1
        return len(range(step - 1, layers, step))
    if f.find("first_k_dense_replace", "moe_layer_freq")[0] is not None:
        first = f.integer("first_k_dense_replace", minimum=0, maximum=layers, default=0)
        freq = f.integer("moe_layer_freq", maximum=max(layers, 1), default=1)
        if first is None or freq is None:
            return layers
        return sum(1 for i in range(first, layers) if i % freq == 0)
    if f.find("decoder_sparse_step", "mlp_only_layers")[0] is not None:
        step = f.integer("decoder_sparse_step", maximum=max(layers, 1), default=1) or 1
        key, dense = f.find("mlp_only_layers")
        dense = [] if key is None else dense
        if not isinstance(dense, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in dense):
            f.fail(key or "mlp_only_layers", "must be a list of layer numbers", dense)
            dense = []
        return sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)
    return layers


def _dtypes(f: _Fields) -> tuple[float, bool, float]:
    """(weight bytes per parameter, whether the weights are fp8, KV bytes per element)."""
    key, dtype = f.text("torch_dtype", "dtype", fallback=True)
    if dtype is not None and dtype not in SIXTEEN_BIT_DTYPES:
        f.fail(key or "torch_dtype", "must be one of " + ", ".join(SIXTEEN_BIT_DTYPES)
               + " (fp8 weights are given by quantization_config)", dtype)
    key, quant = f.find("quantization_config", fallback=True)
    if key is None:
        return 2.0, False, 2.0
    if not isinstance(quant, dict):
        f.fail(key, "must be an object", quant)
        return 2.0, False, 2.0
    method = quant.get("quant_method")
    fp8 = False
    kv_bytes = 2.0
    if method in FP8_METHODS:
        fp8 = True
    elif method == "modelopt":
        fp8 = quant.get("quant_algo") == "FP8"
        if not fp8:
            f.fail(f"{key}.quant_algo", "only FP8 is modelled among modelopt's algorithms",
                   quant.get("quant_algo"))
            return 2.0, False, kv_bytes
    elif method == "compressed-tensors":
        groups = quant.get("config_groups")
        weights = ([g.get("weights") for g in groups.values() if isinstance(g, dict)]
                   if isinstance(groups, dict) else [])
        fp8 = bool(weights) and all(isinstance(w, dict) and w.get("num_bits") == 8
                                    and w.get("type") == "float" for w in weights)
        scheme = quant.get("kv_cache_scheme")
        if isinstance(scheme, dict) and scheme.get("num_bits") == 8 and \
                scheme.get("type") == "float":
            kv_bytes = 1.0
        if not fp8:
            f.fail(f"{key}.config_groups", "only 8-bit float weights are modelled among "
                   "compressed-tensors schemes", groups)
            return 2.0, False, kv_bytes
    if not fp8:
        f.fail(f"{key}.quant_method", "only fp8 quantisation is modelled (fp8, fbgemm_fp8, "
               "compressed-tensors with 8-bit float weights, modelopt FP8)", method)
        return 2.0, False, kv_bytes
    return 1.0, True, kv_bytes
