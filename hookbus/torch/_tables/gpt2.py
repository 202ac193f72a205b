"""GPT-2: fused ``c_attn`` ([q | k | v]), ``Conv1D`` projections, learned positions."""

from __future__ import annotations

from typing import Any

from torch import nn

from .._architecture import Architecture, Block, Dims, Fused, has_modules


def _is_gpt2(body: nn.Module) -> bool:
    return has_modules(body, "wte", "wpe", "ln_f", "h.0.attn.c_attn", "h.0.mlp.c_fc")


def _dims(config: Any) -> Dims:
    return Dims(config.n_layer, config.n_head, config.n_head, config.n_embd // config.n_head)


GPT2 = Architecture(
    name="GPT-2",
    detect=_is_gpt2,
    embed="wte",
    pos_embed="wpe",
    blocks="h",
    ln_final="ln_f",
    dims=_dims,
    block=Block(
        ln1="ln_1",
        ln2="ln_2",
        attn="attn",
        qkv=Fused("attn.c_attn"),
        o="attn.c_proj",
        mlp_in="mlp.c_fc",
        mlp_down="mlp.c_proj",
        mlp_out="mlp",
    ),
)
