"""GPT-NeoX (Pythia): per-head fused ``query_key_value``, partial rotary, parallel residual."""

from __future__ import annotations

from typing import Any

from torch import nn

from .._architecture import Architecture, Block, Dims, Fused, has_modules


def _is_gpt_neox(body: nn.Module) -> bool:
    return has_modules(
        body, "embed_in", "final_layer_norm", "layers.0.attention.query_key_value",
        "layers.0.mlp.dense_h_to_4h",
    )  # fmt: skip


def _dims(config: Any) -> Dims:
    heads = config.num_attention_heads
    return Dims(
        config.num_hidden_layers, heads, heads, config.hidden_size // heads,
        parallel=bool(config.use_parallel_residual),
    )  # fmt: skip


GPT_NEOX = Architecture(
    name="GPT-NeoX",
    detect=_is_gpt_neox,
    embed="embed_in",
    blocks="layers",
    ln_final="final_layer_norm",
    dims=_dims,
    block=Block(
        ln1="input_layernorm",
        ln2="post_attention_layernorm",
        attn="attention",
        qkv=Fused("attention.query_key_value", order="per_head"),
        o="attention.dense",
        mlp_in="mlp.dense_h_to_4h",
        mlp_down="mlp.dense_4h_to_h",
        mlp_out="mlp",
        # rotate_half(q), rotate_half(k), then [rotated | passed] for q, then for k
        rotary=("cat", 2, 3),
    ),
)
