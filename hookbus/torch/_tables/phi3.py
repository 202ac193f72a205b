"""Phi-3: Llama's norms, fused ``qkv_proj`` ([q | k | v]) and ``gate_up_proj`` ([gate | up])."""

from __future__ import annotations

from torch import nn

from .._architecture import Architecture, Block, Fused, has_modules
from .llama import llama_dims


def _is_phi3(body: nn.Module) -> bool:
    return has_modules(
        body, "embed_tokens", "norm", "layers.0.input_layernorm",
        "layers.0.post_attention_layernorm", "layers.0.self_attn.qkv_proj",
        "layers.0.self_attn.o_proj", "layers.0.mlp.gate_up_proj", "layers.0.mlp.down_proj",
    )  # fmt: skip


PHI3 = Architecture(
    name="Phi-3",
    detect=_is_phi3,
    embed="embed_tokens",
    blocks="layers",
    ln_final="norm",
    dims=llama_dims,
    block=Block(
        ln1="input_layernorm",
        ln2="post_attention_layernorm",
        attn="self_attn",
        qkv=Fused("self_attn.qkv_proj"),
        o="self_attn.o_proj",
        mlp_in="mlp.gate_up_proj",
        mlp_down="mlp.down_proj",
        mlp_out="mlp",
        gate_up=True,
        # rotate_half(q), [rotated | passed] for q, then the same two for k
        rotary=("cat", 1, 3),
    ),
)
