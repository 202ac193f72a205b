"""Llama's layout, shared by most decoder-only models (Mistral, Qwen2, ...): detected
by structure, so any model built this way has the vocabulary."""

from __future__ import annotations

from typing import Any

from torch import nn

from .._architecture import Architecture, Block, Dims, Separate, has_modules

LAYER = (
    "layers.0.input_layernorm", "layers.0.post_attention_layernorm",
    "layers.0.self_attn.q_proj", "layers.0.self_attn.k_proj", "layers.0.self_attn.v_proj",
    "layers.0.self_attn.o_proj",
    "layers.0.mlp.gate_proj", "layers.0.mlp.up_proj", "layers.0.mlp.down_proj",
)  # fmt: skip


QK_NORMS = ("layers.0.self_attn.q_norm", "layers.0.self_attn.k_norm")
"""Norms of the queries and keys (Qwen3, Gemma 3): their operations come before the
rotary embedding's, so a layout with them has tables of its own."""


def _is_llama_like(body: nn.Module) -> bool:
    return has_modules(body, "embed_tokens", "norm", *LAYER) and not has_modules(body, QK_NORMS[0])


def llama_dims(config: Any) -> Dims:
    """Sizes of a Llama-like config (``head_dim`` where it is set, GQA's key-value heads)."""
    heads = config.num_attention_heads
    d_head = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return Dims(config.num_hidden_layers, heads, kv_heads, d_head)


LLAMA_BLOCK = Block(
    ln1="input_layernorm",
    ln2="post_attention_layernorm",
    attn="self_attn",
    qkv=Separate("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    o="self_attn.o_proj",
    mlp_in="mlp.gate_proj",
    mlp_down="mlp.down_proj",
    mlp_out="mlp",
    mlp_linear="mlp.up_proj",
    rotary=("add", 0, 1),  # q * cos + rotate_half(q) * sin, then the same for k
)

LLAMA = Architecture(
    name="Llama-like (Llama, Mistral, Qwen2, ...)",
    detect=_is_llama_like,
    embed="embed_tokens",
    blocks="layers",
    ln_final="norm",
    dims=llama_dims,
    block=LLAMA_BLOCK,
)
