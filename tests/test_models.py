"""Models from their config.json (gpu/models.py, gpu/hfconfig.py, gpu/catalogue.py):
parameter, FLOP and byte counts on tiny hand-computed configs, every shipped config
against its published size, and bad configs refused with every problem named.

The tiny dense config used throughout (TINY): 2 layers, d 8, 2 heads of head_dim 4
(8 / 2), 2 KV heads, a gated MLP of width 16, vocabulary 10, untied:
- attention per layer: Q 8 x 2 x 4 = 64, K and V 2 x 8 x 2 x 4 = 128, O 2 x 4 x 8 = 64:
  256; dense MLP 3 x 8 x 16 = 384; linear 2 x (256 + 384) = 1,280;
- embedding 10 x 8 = 80, LM head 80, norms 2 x 8 x 2 + 8 = 40: 1,480 parameters;
- FLOPs: 2 x 1,280 = 2,560 per token; LM head 2 x 10 x 8 = 160 per row; attention
  4 x 2 x 4 = 32 per (query, key) pair per layer, 64 over both layers;
- KV: 2 x 2 x 4 = 16 elements per token per layer, x 2 layers x 2 bytes = 64 bytes.
"""
from __future__ import annotations

import copy
import json

import pytest

from conftest import ROOT, req, run_cli, write_trace
from scheduler_sim.gpu.catalogue import ALIASES, CATALOGUE, MODELS, cost_specs
from scheduler_sim.gpu.models import MlaSpec, ModelSpec
from scheduler_sim.records.errors import ConfigError, TraceError
from scheduler_sim.records.options import Options

DATA = ROOT / "scheduler_sim" / "gpu" / "data" / "models"

TINY = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 8,
        "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 16,
        "vocab_size": 10, "hidden_act": "silu", "torch_dtype": "bfloat16",
        "tie_word_embeddings": False}


def spec(config: dict, name: str = "tiny") -> ModelSpec:
    return ModelSpec.from_config(config, name, "tiny.json")


def with_(**changes) -> dict:
    config = copy.deepcopy(TINY)
    config.update(changes)
    return {k: v for k, v in config.items() if v is not None}


# --- a tiny dense model ----------------------------------------------------------------

def test_tiny_dense_fields():
    """The fields read: 2 layers, d 8, 2 heads and 2 KV heads of 4, MLP 16, vocab 10,
    gated, untied, bf16 weights and KV, no experts, no MLA; the file is the source."""
    m = spec(TINY)
    assert (m.layers, m.d_model, m.heads, m.kv_heads, m.head_dim, m.intermediate,
            m.vocab) == (2, 8, 2, 2, 4, 16, 10)
    assert (m.gated_mlp, m.tied_embeddings, m.fp8, m.weight_bytes_per_param,
            m.kv_dtype_bytes) == (True, False, False, 2.0, 2.0)
    assert (m.experts, m.moe_layers, m.kv_width, m.mla, m.source) == (0, 0, 0, None,
                                                                       "tiny.json")


def test_tiny_dense_parameters():
    """Attention 64 + 128 + 64 = 256 a layer, MLP 384, linear 1,280, embedding and LM head
    80 each, norms 40: 1,480 parameters, all active (no experts)."""
    m = spec(TINY)
    assert m.attention_params_per_layer == 256
    assert m.dense_mlp_params == 384
    assert (m.expert_params, m.moe_mlp_params, m.moe_active_mlp_params) == (0, 0, 0)
    assert m.linear_params == m.active_linear_params == 1280
    assert (m.embedding_params, m.lm_head_params, m.norm_params) == (80, 80, 40)
    assert m.parameters == m.active_parameters == 1480


def test_tiny_dense_flops_and_bytes():
    """Weights 1,480 x 2 = 2,960 B; 2,560 FLOPs a token; 160 a row of logits; 32 per pair a
    layer, 64 over both; KV 64 B a token; a prefill of 3 tokens after 2 of context: 3 x 2 +
    3 x 4 / 2 = 12 pairs, 2,560 x 3 + 64 x 12 = 8,448 FLOPs."""
    m = spec(TINY)
    assert m.weight_bytes == 2960
    assert m.linear_flops_per_token == 2560
    assert m.lm_head_flops_per_row == 160
    assert (m.attention_flops_per_pair, m.attention_flops_per_pair_total) == (32, 64)
    assert (m.kv_token_width, m.kv_bytes_per_token) == (16, 64)
    assert m.prefill_flops(3, context=2) == 8448
    assert m.prefill_flops(1) == 2560 + 64  # one token attends to itself


def test_kv_per_gpu_splits_heads_and_replicates_past_them():
    """TINY's 2 KV heads over tp GPUs: tp 1 all 64 B; tp 2 one head, 2 x 2 x 1 x 4 x 2 =
    32 B; tp 4: 2 // 4 = 0 heads, replicated as 1: 32 B."""
    m = spec(TINY)
    assert [m.kv_bytes_per_token_per_gpu(tp) for tp in (1, 2, 4)] == [64, 32, 32]


def test_gqa_with_an_explicit_head_dim():
    """4 heads of head_dim 3 (not 8 / 4) sharing 1 KV head: Q 8 x 4 x 3 = 96, K and V
    2 x 8 x 1 x 3 = 48, O 4 x 3 x 8 = 96: 240 a layer; linear 2 x (240 + 384) = 1,248;
    1,448 parameters; 4 x 4 x 3 = 48 FLOPs a pair; KV 2 x 1 x 3 = 6 a layer, 24 B a token,
    and 24 on each of 2 GPUs (the one head replicated)."""
    m = spec(with_(num_attention_heads=4, num_key_value_heads=1, head_dim=3))
    assert (m.heads, m.kv_heads, m.head_dim) == (4, 1, 3)
    assert m.attention_params_per_layer == 240
    assert m.linear_params == 1248 and m.parameters == 1448
    assert m.attention_flops_per_pair == 48
    assert (m.kv_bytes_per_token, m.kv_bytes_per_token_per_gpu(2)) == (24, 24)


def test_kv_heads_default_to_the_heads():
    """Without num_key_value_heads every head has its own K and V (Llama-2-7B's MHA)."""
    assert spec(with_(num_key_value_heads=None)).kv_heads == 2


def test_tied_embeddings_count_the_table_once():
    """tie_word_embeddings: the LM head is the embedding table: 1,480 - 80 = 1,400
    parameters, 2,800 weight bytes; its FLOPs per row stay 160."""
    m = spec(with_(tie_word_embeddings=True))
    assert m.tied_embeddings and m.parameters == 1400 and m.weight_bytes == 2800
    assert m.lm_head_flops_per_row == 160


def test_ungated_mlp_has_two_matrices():
    """A GPT-NeoX-style MLP (up, down): 2 x 8 x 16 = 256 a layer; linear 2 x (256 + 256) =
    1,024; 1,224 parameters."""
    m = spec(with_(model_type="gpt_neox", hidden_act="gelu"))
    assert not m.gated_mlp
    assert m.dense_mlp_params == 256 and m.parameters == 1224


# --- fp8 --------------------------------------------------------------------------------

def test_fp8_weights_are_one_byte_in_the_linear_layers():
    """quant_method fp8: 1 byte a linear weight, the embedding, LM head and norms kept in
    bf16: 1,280 x 1 + (80 + 80 + 40) x 2 = 1,680 B. Parameters and FLOPs do not change;
    the KV stays 2 bytes (64 B a token)."""
    m = spec(with_(quantization_config={"quant_method": "fp8", "fmt": "e4m3"}))
    assert (m.fp8, m.weight_bytes_per_param, m.kv_dtype_bytes) == (True, 1.0, 2.0)
    assert m.parameters == 1480 and m.linear_flops_per_token == 2560
    assert m.weight_bytes == 1680
    assert m.kv_bytes_per_token == 64


def test_compressed_tensors_fp8_and_an_fp8_kv_cache():
    """compressed-tensors with 8-bit float weights is fp8 (Llama-4-Scout's format); an
    8-bit float kv_cache_scheme makes the KV 1 byte: 2 layers x 16 x 1 = 32 B a token."""
    quant = {"quant_method": "compressed-tensors",
             "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}},
             "kv_cache_scheme": {"num_bits": 8, "type": "float"}}
    m = spec(with_(quantization_config=quant))
    assert (m.fp8, m.weight_bytes_per_param, m.kv_dtype_bytes) == (True, 1.0, 1.0)
    assert m.kv_bytes_per_token == 32


def test_other_quantisations_are_refused():
    """AWQ, 4-bit compressed-tensors and modelopt NVFP4 are not modelled: refused naming
    the field and the value."""
    for quant, field in (({"quant_method": "awq", "bits": 4}, "quantization_config.quant_method"),
                         ({"quant_method": "compressed-tensors", "config_groups": {
                             "g": {"weights": {"num_bits": 4, "type": "int"}}}},
                          "quantization_config.config_groups"),
                         ({"quant_method": "modelopt", "quant_algo": "NVFP4"},
                          "quantization_config.quant_algo")):
        with pytest.raises(ConfigError) as info:
            spec(with_(quantization_config=quant))
        assert info.value.problems[0].startswith(f"tiny.json: field '{field}': "), quant


# --- MoE --------------------------------------------------------------------------------

MOE = with_(model_type="deepseek_v2", num_hidden_layers=3, n_routed_experts=4,
            num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=6,
            first_k_dense_replace=1, moe_layer_freq=1)


def test_moe_with_a_shared_expert():
    """3 layers, the first dense (first_k_dense_replace 1): 4 routed experts of width 6, 2
    a token, 1 shared. An expert 3 x 8 x 6 = 144, the router 8 x 4 = 32: an MoE layer
    4 x 144 + 144 + 32 = 752, active 2 x 144 + 144 + 32 = 464. Linear 3 x 256 + 384 +
    2 x 752 = 2,656, active 768 + 384 + 2 x 464 = 2,080; norms 2 x 8 x 3 + 8 = 56;
    parameters 2,656 + 160 + 56 = 2,872, active 2,296; FLOPs 2 x 2,080 = 4,160 a token;
    weight bytes from all of them: 5,744."""
    m = spec(MOE)
    assert (m.experts, m.experts_per_token, m.shared_experts, m.expert_intermediate,
            m.shared_expert_intermediate, m.moe_layers, m.intermediate) == (4, 2, 1, 6, 6, 2, 16)
    assert (m.expert_params, m.shared_expert_params, m.router_params) == (144, 144, 32)
    assert (m.moe_mlp_params, m.moe_active_mlp_params) == (752, 464)
    assert (m.linear_params, m.active_linear_params) == (2656, 2080)
    assert (m.parameters, m.active_parameters) == (2872, 2296)
    assert m.linear_flops_per_token == 4160
    assert m.weight_bytes == 5744


def test_mixtral_style_moe_every_layer():
    """num_local_experts with intermediate_size as the expert width and no dense layer:
    intermediate 0; 2 MoE layers of 4 x 384 + 8 x 4 = 1,568, active 2 x 384 + 32 = 800;
    linear 2 x 256 + 2 x 1,568 = 3,648."""
    m = spec(with_(model_type="mixtral", num_local_experts=4, num_experts_per_tok=2))
    assert (m.moe_layers, m.intermediate, m.expert_intermediate, m.shared_experts) == (
        2, 0, 16, 0)
    assert (m.moe_mlp_params, m.moe_active_mlp_params, m.linear_params) == (1568, 800, 3648)


def test_qwen_moe_layers_and_shared_expert():
    """Qwen2-MoE: num_experts 4 of moe_intermediate_size 6, one shared expert of width 10
    (3 x 8 x 10 = 240), mlp_only_layers [0] dense (intermediate_size 16): 3 layers, 2 MoE;
    an MoE layer 4 x 144 + 240 + 32 = 848."""
    m = spec(with_(model_type="qwen2_moe", num_hidden_layers=3, num_experts=4,
                   num_experts_per_tok=1, moe_intermediate_size=6,
                   shared_expert_intermediate_size=10, decoder_sparse_step=1,
                   mlp_only_layers=[0]))
    assert (m.moe_layers, m.shared_experts, m.shared_expert_intermediate, m.intermediate) == (
        2, 1, 10, 16)
    assert m.moe_mlp_params == 848


def test_llama4_text_config_and_interleaved_moe_layers():
    """Llama-4 nests the text model in text_config; with interleave_moe_layer_step 2, of 4
    layers the MoE ones are 1 and 3; experts intermediate_size 6 wide with one shared of
    the same width, dense layers intermediate_size_mlp 16 wide; the dtype and the
    quantisation come from the top level."""
    text = {"model_type": "llama4_text", "num_hidden_layers": 4, "hidden_size": 8,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
            "intermediate_size": 6, "intermediate_size_mlp": 16, "num_local_experts": 4,
            "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "vocab_size": 10}
    config = {"model_type": "llama4", "text_config": text, "torch_dtype": "bfloat16",
              "quantization_config": {"quant_method": "fp8"}}
    m = spec(config)
    assert (m.moe_layers, m.intermediate, m.expert_intermediate, m.shared_experts,
            m.shared_expert_intermediate, m.fp8) == (2, 16, 6, 1, 6, True)
    assert m.dense_layers == 2


def test_mla_attention():
    """MLA without q_lora (DeepSeek-V2-Lite's form), d 8, 2 heads, kv_lora_rank 4, nope 2,
    rope 1, v 2, 1 layer: Q 8 x 2 x 3 = 48, KV down 8 x (4 + 1) = 40, KV up 4 x 2 x (2 +
    2) = 32, O 2 x 2 x 8 = 32: 152. With q_lora_rank 3: Q 8 x 3 + 3 x 2 x 3 = 42, 146. A
    pair: 2 x 2 x (2 + 1 + 2) = 20 FLOPs. The cache keeps the latent, 4 + 1 = 5 elements
    a layer: 10 B a token, whole on every GPU."""
    mla = with_(num_hidden_layers=1, kv_lora_rank=4, q_lora_rank=None, qk_nope_head_dim=2,
                qk_rope_head_dim=1, v_head_dim=2)
    m = spec(mla)
    assert m.mla == MlaSpec(0, 4, 2, 1, 2)
    assert (m.head_dim, m.kv_width) == (3, 5)
    assert m.attention_params_per_layer == 152
    assert m.attention_flops_per_pair == 20
    assert (m.kv_bytes_per_token, m.kv_bytes_per_token_per_gpu(2)) == (10, 10)
    assert spec(with_(**{**mla, "q_lora_rank": 3})).attention_params_per_layer == 146


def test_sparse_attention_indexer():
    """GLM-5's indexer (2 heads of 3, q_lora_rank 3): 3 x 2 x 3 + 8 x 3 + 8 x 2 = 58 more
    parameters a layer (146 + 58 = 204) and 2 x 2 x 3 = 12 more FLOPs a pair (32)."""
    m = spec(with_(num_hidden_layers=1, kv_lora_rank=4, q_lora_rank=3, qk_nope_head_dim=2,
                   qk_rope_head_dim=1, v_head_dim=2, index_n_heads=2, index_head_dim=3,
                   index_topk=4))
    assert m.attention_params_per_layer == 204
    assert m.attention_flops_per_pair == 32


# --- the catalogue ------------------------------------------------------------------------

# Published sizes (total, active) and where they are from.
PUBLISHED = {
    "llama-2-7b": (6.74e9, None),        # Hugging Face meta-llama/Llama-2-7b-hf: 6.74B params
    "llama-2-70b": (68.98e9, None),      # Hugging Face meta-llama/Llama-2-70b-hf: 69B (68.98B)
    "codellama-34b": (33.7e9, None),     # Hugging Face codellama/CodeLlama-34b-Instruct-hf: 33.7B
    "llama-3.1-8b": (8.03e9, None),      # Hugging Face meta-llama/Llama-3.1-8B-Instruct: 8.03B
    "llama-3.1-70b": (70.6e9, None),     # Hugging Face meta-llama/Llama-3.1-70B-Instruct: 70.6B
    "mistral-nemo-12b": (12.2e9, None),  # Hugging Face mistralai/Mistral-Nemo-Instruct-2407: 12.2B
    "qwen2.5-7b": (7.61e9, None),        # Qwen2.5-7B-Instruct model card: 7.61B
    "qwen3-14b": (14.8e9, None),         # Qwen3-14B model card: 14.8B
    "yi-34b": (34.4e9, None),            # Hugging Face 01-ai/Yi-34B: 34.4B
    "mixtral-8x7b": (46.7e9, 12.9e9),    # Mistral AI, "Mixtral of experts": 46.7B, 12.9B a token
    "qwen3-30b-a3b": (30.5e9, 3.3e9),    # Qwen3-30B-A3B model card: 30.5B, 3.3B activated
    "deepseek-v2-lite": (15.7e9, None),  # DeepSeek-V2 paper / model card: 15.7B (2.4B activated
                                         # counts no embedding: ours, with both tables, 2.66B)
    "llama-4-scout-17b-16e-fp8": (None, 17e9),  # Meta: 17B active, 109B total with the vision
                                                # encoder (see the test below)
    "glm-5.2-fp8": (744e9, None),        # GLM-5 technical report: 744B (40B activated, rounded)
}


def test_every_catalogue_model_parses_and_is_listed_with_its_source():
    """Each shipped config.json parses under its catalogue name, its source is its file,
    every file of the data folder is in the catalogue, and the folder ships the sources and
    the license."""
    files = sorted(p.stem for p in DATA.glob("*.json"))
    assert files == sorted(CATALOGUE)
    assert set(PUBLISHED) == set(CATALOGUE)
    for name in CATALOGUE:
        m = MODELS[name]
        assert m.name == name and m.source.endswith(f"data/models/{name}.json")
    sources = (DATA / "SOURCES.md").read_text(encoding="utf-8")
    assert all(f"`{name}.json`" in sources for name in CATALOGUE)
    assert "Apache License" in (DATA / "LICENSE.inference-sim").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_are_within_1_percent_of_the_published(name):
    """parameters within 1% of the figure its authors publish (PUBLISHED gives each and
    its source); active_parameters, where published, within 2%: those figures have two
    significant digits (Qwen3-30B-A3B's 3.3B for our 3.353e9, Llama-4-Scout's 17B for
    17.17e9), Mixtral's 12.9B for 12.88e9 is within 1%."""
    total, active = PUBLISHED[name]
    m = MODELS[name]
    if total is not None:
        assert abs(m.parameters - total) <= 0.01 * total, (m.parameters, total)
    if active is not None:
        assert abs(m.active_parameters - active) <= 0.02 * active, (m.active_parameters, active)


def test_llama_4_scout_with_its_vision_encoder_is_109b():
    """Meta's 109B counts the vision encoder, which a text-serving simulator leaves out:
    its 34 layers of width 1408 (attention 4 x 1408^2, a plain MLP 2 x 1408 x 5632, from
    the config's vision_config) add about 0.81e9 to the text model's 107.77e9: 108.58e9,
    within 1% of 109e9."""
    m = MODELS["llama-4-scout-17b-16e-fp8"]
    vision = json.loads((DATA / "llama-4-scout-17b-16e-fp8.json").read_text())["vision_config"]
    d, width, layers = vision["hidden_size"], vision["intermediate_size"], \
        vision["num_hidden_layers"]
    encoder = layers * (4 * d * d + 2 * d * width)
    assert (d, width, layers) == (1408, 5632, 34)
    assert abs(m.parameters + encoder - 109e9) <= 0.01 * 109e9


def test_llama_3_8b_from_its_config():
    """Llama-3.1-8B: 32 x (attention 4096^2 x 2 + 2 x 4096 x 1024 = 41,943,040 + MLP 3 x
    4096 x 14336 = 176,160,768) = 6,979,321,856 linear; embedding and LM head 128,256 x
    4096 = 525,336,576 each; norms 2 x 4096 x 32 + 4096 = 266,240: 8,030,261,248 (the first
    catalogue's rounded 8.0e9)."""
    m = MODELS["llama-3.1-8b"]
    assert m.linear_params == 6_979_321_856
    assert m.embedding_params == m.lm_head_params == 525_336_576
    assert m.norm_params == 266_240
    assert m.parameters == 8_030_261_248
    assert MODELS["llama-3.1-70b"].parameters == 70_553_706_496


def test_old_names_are_aliases_of_the_llama_3_1_configs():
    """llama-3-8b and llama-3-70b keep their names and have the Llama-3.1 architecture."""
    import dataclasses
    for alias, name in ALIASES.items():
        old, new = MODELS[alias], MODELS[name]
        assert old.name == alias
        assert dataclasses.replace(old, name=name, source="") == \
            dataclasses.replace(new, source="")


def test_the_fp8_and_mla_models_of_the_catalogue():
    """Llama-4-Scout FP8 (compressed-tensors, 8-bit float weights): fp8, 1 byte a linear
    weight; 48 MoE layers of 16 experts, 1 a token, 1 shared. DeepSeek-V2-Lite: MLA, KV
    27 layers x (512 + 64) x 2 B = 31,104 B a token; 26 MoE layers of 64, 6 a token, 2
    shared. GLM: fp8, MLA with the indexer, 75 of 78 layers MoE."""
    scout = MODELS["llama-4-scout-17b-16e-fp8"]
    assert (scout.fp8, scout.weight_bytes_per_param, scout.moe_layers, scout.experts,
            scout.experts_per_token, scout.shared_experts) == (True, 1.0, 48, 16, 1, 1)
    lite = MODELS["deepseek-v2-lite"]
    assert lite.kv_bytes_per_token == 27 * 576 * 2 == 31_104
    assert (lite.moe_layers, lite.experts, lite.experts_per_token, lite.shared_experts) == (
        26, 64, 6, 2)
    glm = MODELS["glm-5.2-fp8"]
    assert glm.fp8 and glm.mla.index_heads == 32 and glm.moe_layers == 75


# --- bad configs ----------------------------------------------------------------------------

def test_every_problem_of_a_config_is_listed_with_its_field():
    """Three bad fields, one missing: four problems, each `FILE: field 'K': what, got what`."""
    bad = with_(num_attention_heads="x", hidden_size=None, num_hidden_layers=10_001,
                vocab_size=True)
    with pytest.raises(ConfigError) as info:
        spec(bad)
    assert info.value.problems == [
        "tiny.json: field 'num_hidden_layers': must be an integer from 1 to 10,000, got 10001",
        "tiny.json: field 'hidden_size': missing (an integer from 1 to 1,000,000 is required)",
        "tiny.json: field 'num_attention_heads': must be an integer from 1 to 100,000, got 'x'",
        "tiny.json: field 'vocab_size': must be an integer from 1 to 100,000,000, got true"]
    assert isinstance(info.value, TraceError)  # exit status 2


@pytest.mark.parametrize("changes, problem", [
    ({"num_key_value_heads": 3}, "field 'num_key_value_heads': must divide the 2 attention "
                                 "heads, got 3"),
    ({"hidden_size": 9}, "field 'head_dim': missing, and hidden_size 9 is not a whole number "
                         "of heads (2)"),
    ({"torch_dtype": "int4"}, "field 'torch_dtype': must be one of bfloat16"),
    ({"tie_word_embeddings": "no"}, "field 'tie_word_embeddings': must be true or false, "
                                    "got 'no'"),
    ({"num_local_experts": 8}, "field 'num_experts_per_tok': missing (an integer from 1 to "
                               "8 is required)"),
    ({"num_local_experts": 8, "num_experts_per_tok": 9}, "field 'num_experts_per_tok': must "
                                                         "be an integer from 1 to 8, got 9"),
    ({"intermediate_size": 4.5}, "field 'intermediate_size': must be an integer from 1 to "
                                 "10,000,000, got 4.5"),
    ({"is_encoder_decoder": True}, "field 'is_encoder_decoder': an encoder-decoder model is "
                                   "not modelled"),
    ({"hidden_act": 3}, "field 'hidden_act': must be a string, got 3"),
])
def test_bad_fields_are_named(changes, problem):
    """Each inconsistent or absurd field is refused with its name and value."""
    with pytest.raises(ConfigError) as info:
        spec(with_(**changes))
    assert any(p.startswith(f"tiny.json: {problem}") for p in info.value.problems), \
        info.value.problems


def test_a_config_that_is_not_an_object_or_nests_badly():
    """A JSON array, or a text_config that is not an object: one problem naming it."""
    with pytest.raises(ConfigError, match=r"tiny.json: a config.json holds a JSON object"):
        spec([1, 2])
    with pytest.raises(ConfigError, match=r"field 'text_config': must be an object, got 3"):
        spec({"text_config": 3})
    with pytest.raises(ConfigError, match=r"field 'text_config.hidden_size': missing"):
        spec({"text_config": {k: v for k, v in TINY.items() if k != "hidden_size"}})


# --- the options and the command line --------------------------------------------------------

def test_cost_specs_from_the_options():
    """cost_model, or model and gpu, give the same specs; disagreeing names and a model
    without a GPU are usage errors; a file must have been read (io/specs.py) first."""
    from scheduler_sim.gpu.gpus import GPUS
    from scheduler_sim.records.errors import UsageError
    a = cost_specs(Options(cost_model="llama-3-8b/h100-sxm"))
    b = cost_specs(Options(model="llama-3-8b", gpu="h100-sxm"))
    assert a == b == (MODELS["llama-3-8b"], GPUS["h100-sxm"])
    assert cost_specs(Options(cost_model="llama-3-8b/h100-sxm", model="llama-3.1-8b")) == (
        MODELS["llama-3.1-8b"], GPUS["h100-sxm"])  # the same architecture agrees
    assert cost_specs(Options()) is None
    with pytest.raises(UsageError, match="name different models"):
        cost_specs(Options(cost_model="llama-3-8b/h100-sxm", model="qwen3-14b"))
    with pytest.raises(UsageError, match="name different GPUs"):
        cost_specs(Options(cost_model="llama-3-8b/h100-sxm", gpu="h200"))
    with pytest.raises(UsageError, match="needs a model and a GPU"):
        cost_specs(Options(model="qwen3-14b"))
    with pytest.raises(UsageError, match="is a file"):
        cost_specs(Options(model="m/config.json", gpu="h100-sxm"))
    # Not a problem of the options alone: a sweep's axis may give the GPU.
    assert Options(model="qwen3-14b").problems() == []


def test_replay_with_a_model_by_name_names_it_in_the_header(tmp_path):
    """`--model qwen3-30b-a3b --gpu h100-sxm --tp 2`: `cost model qwen3-30b-a3b/h100-sxm on
    2 GPUs`, and the pool from its weights: 2 x 30,532,110,336 B / 2 = 28.44 GiB a GPU."""
    path = write_trace(tmp_path, [req("a", 0, 4, 2)])
    status, out, err = run_cli(["replay", path, "--model", "qwen3-30b-a3b", "--gpu",
                                "h100-sxm", "--tp", "2"])
    assert status == 0, err
    assert any(line.startswith("cost model qwen3-30b-a3b/h100-sxm on 2 GPUs · calibration h100-sxm")
               for line in out.splitlines())
    assert MODELS["qwen3-30b-a3b"].parameters == 30_532_110_336
    assert "weights 28.44 GiB" in out


def test_a_config_path_in_a_trace_is_read_from_the_trace_folder(tmp_path, monkeypatch):
    """The trace's config names `models/q/config.json`: it is read from the trace's folder
    whatever the working directory; the header names the model after its folder and the
    file as given; the same path as a flag is taken from the working directory."""
    folder = tmp_path / "runs"
    (folder / "models" / "q").mkdir(parents=True)
    (folder / "models" / "q" / "config.json").write_bytes(
        (DATA / "qwen3-14b.json").read_bytes())
    trace = folder / "trace.jsonl"
    trace.write_text(json.dumps({"type": "config", "model": "models/q/config.json",
                                 "gpu": "h100-sxm"}) + "\n"
                     + json.dumps(req("a", 0, 4, 2)) + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    status, out, err = run_cli(["replay", str(trace)])
    assert status == 0, err
    assert any(line.startswith("cost model q/h100-sxm (model from models/q/config.json) · "
                               "calibration h100-sxm") for line in out.splitlines())
    status, out, err = run_cli(["replay", str(trace), "--model", "models/q/config.json"])
    assert status == 2 and "models/q/config.json: cannot read" in err
    monkeypatch.chdir(folder)
    status, out, err = run_cli(["replay", "trace.jsonl", "--model", "models/q/config.json"])
    assert status == 0, err


def test_a_bad_config_file_exits_2_listing_its_problems(tmp_path):
    """A config.json with two bad fields: exit 2, nothing on standard output, both
    problems on standard error, each naming the file and the field; invalid JSON names its
    line; a file over 1 MiB is refused unread."""
    path = write_trace(tmp_path, [req("a", 0, 4, 2)])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(with_(num_attention_heads=0, vocab_size="many")))
    status, out, err = run_cli(["replay", path, "--model", str(bad), "--gpu", "h100-sxm"])
    assert status == 2 and out == ""
    assert err.splitlines() == [
        f"{bad}: field 'num_attention_heads': must be an integer from 1 to 100,000, got 0",
        f"{bad}: field 'vocab_size': must be an integer from 1 to 100,000,000, got 'many'"]
    bad.write_text('{\n  "hidden_size": 8,\n  oops\n}\n')
    status, out, err = run_cli(["replay", path, "--model", str(bad), "--gpu", "h100-sxm"])
    assert status == 2 and err.startswith(f"{bad}:3: invalid JSON")
    bad.write_bytes(b" " * (2 ** 20 + 1))
    status, out, err = run_cli(["cost", "--model", str(bad), "--gpu", "h100-sxm",
                                "--seq", "8"])
    assert status == 2 and "larger than 1 MiB" in err


def test_unknown_model_names_are_refused_with_a_suggestion(tmp_path):
    """A misspelt name in a trace's config is a trace problem naming the known models."""
    path = write_trace(tmp_path, [{"type": "config", "model": "qwen3-14", "gpu": "h100-sxm"},
                                  req("a", 0, 4, 2)])
    status, out, err = run_cli(["validate", path])
    assert status == 2
    assert "unknown model 'qwen3-14' (did you mean 'qwen3-14b'?)" in err


def test_models_command_lists_both_catalogues():
    """`scheduler-sim models` prints every model (with its total and active parameters)
    and every GPU, and the aliases."""
    from scheduler_sim.gpu.gpus import GPUS
    status, out, err = run_cli(["models"])
    assert status == 0 and err == ""
    lines = out.splitlines()
    for name in CATALOGUE:
        assert any(line.startswith(name + " ") for line in lines), name
    for name in GPUS:
        assert any(line.startswith(name + " ") for line in lines), name
    mixtral = next(line for line in lines if line.startswith("mixtral-8x7b "))
    assert "46.70B" in mixtral and "12.88B" in mixtral and "8, top 2" in mixtral
    assert "aliases: llama-3-8b = llama-3.1-8b, llama-3-70b = llama-3.1-70b" in lines


def test_a_sweep_over_models_and_a_config_path(tmp_path, monkeypatch):
    """`sweep --grid model=llama-3.1-8b,FILE --gpu h100-sxm`: the model is an axis like any
    option, a path among its values read once; the GPU fixed alone is no problem."""
    path = write_trace(tmp_path, [req("a", 0, 4, 2)])
    (tmp_path / "q.json").write_bytes((DATA / "qwen3-14b.json").read_bytes())
    monkeypatch.chdir(tmp_path)
    status, out, err = run_cli(["sweep", path, "--grid", "model=llama-3.1-8b,q.json",
                                "--gpu", "h100-sxm", "--policy", "vllm"])
    assert status == 0, err
    rows = [line.split()[1] for line in out.splitlines()[3:]]
    assert rows == ["llama-3.1-8b", "q.json"]


def test_the_shipped_configs_are_unchanged():
    """Every config.json ships byte for byte as published: its SHA-256 is the one
    SOURCES.md records."""
    import hashlib
    import re
    sources = (DATA / "SOURCES.md").read_text(encoding="utf-8")
    recorded = dict((name, digest) for digest, name in
                    re.findall(r"^([0-9a-f]{64})  (\S+\.json)$", sources, re.M))
    assert sorted(recorded) == sorted(f"{name}.json" for name in CATALOGUE)
    for name, digest in recorded.items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, name
