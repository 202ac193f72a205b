"""The table format: where each value of the names vocabulary lives in one model layout.

An :class:`Architecture` is data: the paths of a Hugging Face model's modules
that hold each value (relative to the model's *body*, the module that holds the
blocks), and how a fused projection packs its heads. :mod:`._vocabulary` turns
each entry into a recipe (:mod:`._recipes`) that reads and writes the value
through module points and operation points; :mod:`._table_detection` lists the
tables and finds the one a model's structure matches. Adding an architecture is
one table in ``_tables/`` (docs/torch.md, "Adding an architecture").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple, Union

from torch import nn

__all__ = ["Architecture", "Block", "Dims", "Fused", "Separate", "has_modules"]


@dataclass(frozen=True)
class Separate:
    """Queries, keys and values come from three projections (Llama's ``q_proj``...)."""

    q: str
    k: str
    v: str


@dataclass(frozen=True)
class Fused:
    """One projection outputs queries, keys and values.

    ``order="concat"``: ``[q | k | v]`` along the last dimension (GPT-2's
    ``c_attn``, Phi-3's ``qkv_proj``, keys and values with the key-value heads);
    ``order="per_head"``: each head's ``[q k v]`` in turn (GPT-NeoX's
    ``query_key_value``).
    """

    path: str
    order: str = "concat"


@dataclass(frozen=True)
class Block:
    """Where each value of one block lives, by path relative to the block.

    Attributes:
        ln1: the norm before attention (``ln1.hook_normalized`` / ``hook_scale``).
        ln2: the norm before the MLP; its input is ``hook_resid_mid``.
        attn: the attention module: its operations give the scores, the pattern
            and the rotated queries and keys; its output (first item) is
            ``hook_attn_out`` unless ``attn_out`` says otherwise.
        qkv: :class:`Separate` or :class:`Fused` projections (``hook_q/k/v``).
        o: the output projection; its input is ``hook_z``, and ``hook_result``
            is its output split by head.
        mlp_in: its output is ``mlp.hook_pre`` (a gated MLP's gate, before the
            activation).
        mlp_down: its input is ``mlp.hook_post``.
        mlp_out: the module whose output the residual adds as the MLP's
            (``hook_mlp_out``): the MLP itself, or Gemma 2's norm after it.
        attn_out: a module whose output is ``hook_attn_out`` (Gemma 2's norm after
            attention).
        mlp_linear: its output is ``mlp.hook_pre_linear`` (a gated MLP's up projection).
        gate_up: ``mlp_in`` outputs ``[gate | up]`` (Phi-3's ``gate_up_proj``).
        rotary: the operation whose calls number ``q_index`` and ``k_index`` in
            the attention's forward return the rotated queries and keys
            (``("add", 0, 1)``: ``q * cos + rotate_half(q) * sin``, then keys).
        flat_mlp: the block flattens ``[batch, pos]`` into one dimension around
            its MLP (OPT): the names from ``hook_resid_mid`` to ``hook_mlp_out``
            are seen as ``[batch, pos, ...]`` all the same.
    """

    ln1: str
    ln2: str
    attn: str
    qkv: Union[Separate, Fused]
    o: str
    mlp_in: str
    mlp_down: str
    mlp_out: str
    attn_out: Optional[str] = None
    mlp_linear: Optional[str] = None
    gate_up: bool = False
    rotary: Optional[Tuple[str, int, int]] = None
    flat_mlp: bool = False


@dataclass(frozen=True)
class Dims:
    """The sizes the layouts need, read from a model's config."""

    layers: int
    heads: int
    kv_heads: int
    d_head: int
    parallel: bool = False  # attention and MLP read the same input: no resid_mid


@dataclass(frozen=True)
class Architecture:
    """One table of the vocabulary (docs/torch.md, "Adding an architecture").

    Attributes:
        name: what error messages and ``vocabulary.architecture`` call it.
        detect: whether a module is this layout's body (it holds the blocks):
            a test of structure, never of class name, so every model built
            the same way (most decoder-only models share Llama's) is found.
        embed: the token embedding (``hook_embed`` is its output).
        blocks: the ``nn.ModuleList`` of blocks.
        ln_final: the final norm.
        block: where each value of a block lives.
        dims: the sizes, from the model's config; it raises ``ValueError`` for a
            config the table does not describe (OPT-350m's norms after the blocks).
        pos_embed: the learned position embedding, if any (``hook_pos_embed``).
    """

    name: str
    detect: Callable[[nn.Module], bool]
    embed: str
    blocks: str
    ln_final: str
    block: Block
    dims: Callable[[Any], Dims]
    pos_embed: Optional[str] = None


def has_modules(module: nn.Module, *paths: str) -> bool:
    """Whether ``module`` has a submodule at every dotted path (``"layers.0.mlp"``).

    Example:
        >>> from torch import nn
        >>> body = nn.Module()
        >>> body.layers = nn.ModuleList([nn.Linear(1, 1)])
        >>> has_modules(body, "layers.0"), has_modules(body, "layers.1")
        (True, False)
    """
    for path in paths:
        found: Optional[nn.Module] = module
        for part in path.split("."):
            found = found._modules.get(part) if found is not None else None
        if found is None:
            return False
    return True
