"""OPT: Llama-like separate projections, LayerNorms, a learned position embedding,
``fc1``/``fc2`` on the block itself around ``[batch * pos, d_model]``."""

from __future__ import annotations

from typing import Any

from torch import nn

from .._architecture import Architecture, Block, Dims, Separate, has_modules


def _is_opt(body: nn.Module) -> bool:
    return has_modules(
        body, "embed_tokens", "embed_positions", "layers.0.self_attn_layer_norm",
        "layers.0.self_attn.q_proj", "layers.0.self_attn.out_proj", "layers.0.fc1",
        "layers.0.fc2", "layers.0.final_layer_norm",
    )  # fmt: skip


def _dims(config: Any) -> Dims:
    if not config.do_layer_norm_before:
        raise ValueError(
            "this OPT config normalizes after each block (do_layer_norm_before=False, as "
            "OPT-350m): the names vocabulary describes blocks that normalize before"
        )
    heads = config.num_attention_heads
    return Dims(config.num_hidden_layers, heads, heads, config.hidden_size // heads)


OPT = Architecture(
    name="OPT",
    detect=_is_opt,
    embed="embed_tokens",
    pos_embed="embed_positions",
    blocks="layers",
    ln_final="final_layer_norm",
    dims=_dims,
    block=Block(
        ln1="self_attn_layer_norm",
        ln2="final_layer_norm",
        attn="self_attn",
        qkv=Separate("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        o="self_attn.out_proj",
        mlp_in="fc1",
        mlp_down="fc2",
        mlp_out="fc2",
        flat_mlp=True,
    ),
)
