"""Qwen3: Llama's layout with an RMSNorm on each head's queries and keys (``q_norm``,
``k_norm``), run before the rotary embedding."""

from __future__ import annotations

import dataclasses

from torch import nn

from .._architecture import Architecture, has_modules
from .llama import LAYER, LLAMA_BLOCK, QK_NORMS, llama_dims


def _is_qwen3(body: nn.Module) -> bool:
    return has_modules(body, "embed_tokens", "norm", *LAYER, *QK_NORMS) and not has_modules(
        body, "layers.0.pre_feedforward_layernorm"
    )


QWEN3 = Architecture(
    name="Qwen3",
    detect=_is_qwen3,
    embed="embed_tokens",
    blocks="layers",
    ln_final="norm",
    dims=llama_dims,
    block=dataclasses.replace(
        LLAMA_BLOCK,
        # each norm's variance + eps first, then q * cos + rotate_half(q) * sin, and k's
        rotary=("add", 2, 3),
    ),
)
