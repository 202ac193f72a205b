"""Views: a value of the names vocabulary in TransformerLens's layout, cut from what a
point gives, and put back.

A view reads the value from a tensor a module or an operation holds (the whole
tensor, a slice of a fused projection split into heads, one part of each head's
``[q k v]``, or ``[batch, head, pos, d]`` seen as ``[batch, pos, head, d]``), and
writes a replacement back into that tensor's layout.
"""

from __future__ import annotations

from typing import Optional

import torch
from typing_extensions import Protocol

__all__ = ["HeadsFirst", "LastDimSlice", "PerHeadPart", "View", "Whole"]


class View(Protocol):
    """How a value is cut from a tensor a point holds, and put back."""

    def read(self, x: torch.Tensor) -> torch.Tensor:
        """The value, cut from ``x``."""
        ...

    def write(self, x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """``x`` with the value replaced by ``value``."""
        ...


class Whole:
    """The whole tensor, as it is (``[batch, pos, d_model]`` for the residual stream).

    Example:
        >>> import torch
        >>> x = torch.zeros(1, 2, 3)
        >>> Whole().read(x) is x, Whole().write(x, x + 1).sum().item()
        (True, 6.0)
    """

    def read(self, x: torch.Tensor) -> torch.Tensor:
        """The value, cut from ``x``."""
        return x

    def write(self, x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """``x`` with the value replaced by ``value``."""
        return value


class LastDimSlice:
    """``x[..., start:stop]``, split into ``heads`` heads when given (``[b, s, h, d]``).

    Example:
        >>> import torch
        >>> x = torch.arange(6.0).reshape(1, 1, 6)  # [q | k] of 2 heads of 1 and 1 head
        >>> keys = LastDimSlice(2, 4, heads=2)
        >>> keys.read(x).tolist()
        [[[[2.0], [3.0]]]]
        >>> keys.write(x, torch.zeros(1, 1, 2, 1)).tolist()
        [[[0.0, 1.0, 0.0, 0.0, 4.0, 5.0]]]
    """

    def __init__(self, start: int, stop: int, heads: Optional[int] = None) -> None:
        self.start, self.stop, self.heads = start, stop, heads

    def read(self, x: torch.Tensor) -> torch.Tensor:
        value = (
            x if self.start == 0 and self.stop == x.shape[-1] else x[..., self.start : self.stop]
        )
        return value if self.heads is None else torch.unflatten(value, -1, (self.heads, -1))

    def write(self, x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        flat = value if self.heads is None else value.flatten(-2)
        if self.start == 0 and self.stop == x.shape[-1]:
            return flat
        return torch.cat([x[..., : self.start], flat.to(x.dtype), x[..., self.stop :]], dim=-1)


class PerHeadPart:
    """Part ``part`` of each head's ``[q k v]`` (GPT-NeoX's ``query_key_value``), as
    ``[b, s, h, d]``.

    Example:
        >>> import torch
        >>> x = torch.arange(6.0).reshape(1, 1, 6)  # head 0's [q k v], then head 1's
        >>> PerHeadPart(1, heads=2).read(x).tolist()  # the keys
        [[[[1.0], [4.0]]]]
    """

    def __init__(self, part: int, heads: int, parts: int = 3) -> None:
        self.part, self.heads, self.parts = part, heads, parts

    def read(self, x: torch.Tensor) -> torch.Tensor:
        return torch.unflatten(x, -1, (self.heads, self.parts, -1))[..., self.part, :]

    def write(self, x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        split = torch.unflatten(x, -1, (self.heads, self.parts, -1)).clone()
        split[..., self.part, :] = value
        return split.flatten(-3)


class HeadsFirst:
    """An attention tensor ``[b, h, s, d]`` seen as ``[b, s, h, d]``.

    Example:
        >>> import torch
        >>> HeadsFirst().read(torch.zeros(1, 4, 7, 8)).shape
        torch.Size([1, 7, 4, 8])
    """

    def read(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2)

    def write(self, x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        return value.transpose(1, 2)
