"""Gemma 2: Llama's layout with a norm after attention and around the MLP (four per block)."""

from __future__ import annotations

import dataclasses

from torch import nn

from .._architecture import Architecture, has_modules
from .llama import LAYER, LLAMA_BLOCK, QK_NORMS, llama_dims


def _is_gemma2(body: nn.Module) -> bool:
    return has_modules(
        body, "embed_tokens", "norm", *LAYER,
        "layers.0.pre_feedforward_layernorm", "layers.0.post_feedforward_layernorm",
    ) and not has_modules(body, QK_NORMS[0])  # fmt: skip


GEMMA2 = Architecture(
    name="Gemma 2",
    detect=_is_gemma2,
    embed="embed_tokens",
    blocks="layers",
    ln_final="norm",
    dims=llama_dims,
    block=dataclasses.replace(
        LLAMA_BLOCK,
        ln2="pre_feedforward_layernorm",
        attn_out="post_attention_layernorm",  # the residual adds the normed outputs
        mlp_out="post_feedforward_layernorm",
    ),
)
