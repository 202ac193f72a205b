"""The tables of the names vocabulary, and finding the one a model's structure matches."""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Tuple

from torch import nn

from ._architecture import Architecture, Dims
from ._tables.gemma2 import GEMMA2
from ._tables.gpt2 import GPT2
from ._tables.gpt_neox import GPT_NEOX
from ._tables.llama import LLAMA
from ._tables.opt import OPT
from ._tables.phi3 import PHI3
from ._tables.qwen3 import QWEN3

__all__ = ["DOCS", "TABLES", "Found", "find_architecture"]

TABLES: Tuple[Architecture, ...] = (GPT2, GPT_NEOX, OPT, GEMMA2, PHI3, LLAMA, QWEN3)
"""Every table, tried in this order: a layout that extends another comes first
(Gemma 2's four norms before Llama's two)."""

DOCS = "docs/torch.md, section 'Names'"


class Found(NamedTuple):
    """The table a model matches, where its body is, and its sizes."""

    architecture: Architecture
    body: str  # the body's path in named_modules() ("" for the model itself)
    dims: Dims


def find_architecture(model: nn.Module) -> Found:
    """The table whose structure ``model`` (or a submodule, its body) has.

    ``ValueError`` naming the supported layouts when none matches.

    Example:
        >>> import transformers
        >>> config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=10)
        >>> found = find_architecture(transformers.GPT2LMHeadModel(config))
        >>> found.architecture.name, found.body, found.dims.heads
        ('GPT-2', 'transformer', 2)
    """
    named: List[Tuple[str, nn.Module]] = list(model.named_modules())  # pyright: ignore[reportUnknownArgumentType]
    for path, module in named:
        for table in TABLES:
            if table.detect(module):
                config: Optional[Any] = getattr(module, "config", None)
                if config is None:
                    config = getattr(model, "config", None)
                if config is None:
                    raise ValueError(
                        f"{type(model).__name__} has the {table.name} layout but no "
                        f"config to read its sizes from (heads, layers)"
                    )
                return Found(table, path, table.dims(config))
    supported = ", ".join(table.name for table in TABLES)
    raise ValueError(
        f"{type(model).__name__} has none of the layouts the names vocabulary knows: "
        f"{supported}. Module and operation points still work on it; to add its "
        f"layout, see {DOCS} ('Adding an architecture')"
    )
