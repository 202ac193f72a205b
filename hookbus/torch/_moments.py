"""``Moments``: one module's per-feature statistics, and the exact arithmetic that builds them.

The running statistics are built from *windows* of calls: the float64 sums of
``x - shift`` and of its square over the window, where ``shift`` is the mean of
everything before (see ``_feed.py``). ``merge_window`` joins a window to the
statistics by Chan's formula, keeping the stored mean's rounding error aside so
that values far from zero with a tiny spread stay exact.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch

__all__ = ["Moments", "flatten", "merge_window", "vecdot"]

F64 = torch.float64

vecdot: Callable[..., torch.Tensor] = torch.linalg.vecdot  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
"""``torch.linalg.vecdot``, typed (torch leaves it untyped)."""


class Moments:
    """The moments of one module's values, per feature, in float64: ``count``, ``mean``, ``var``...

    What :func:`~hookbus.torch.stats` keeps for each module (``stats[name]``).
    ``count`` is the number of values reduced into each feature (the same for all
    features); ``mean``, ``var`` (population variance), ``std``, ``min`` and
    ``max`` are float64 tensors of the feature shape (``(features,)``, or ``()``
    with ``dim=None``). ``m2`` is the sum of squared deviations from the mean,
    what exact merging needs. Moments never change: the running statistics
    replace them with new ones.

    Example:
        >>> import torch
        >>> from hookbus.torch import Moments
        >>> a = Moments.of(torch.tensor([[1.0], [2.0]]))
        >>> b = Moments.of(torch.tensor([[3.0], [4.0], [5.0]]))
        >>> both = a.merge(b)
        >>> both.count, both.mean, both.var
        (5, tensor([3.], dtype=torch.float64), tensor([2.], dtype=torch.float64))
        >>> both.min, both.max
        (tensor([1.], dtype=torch.float64), tensor([5.], dtype=torch.float64))
    """

    __slots__ = ("count", "m2", "max", "mean", "min")

    def __init__(
        self,
        count: int,
        mean: torch.Tensor,
        m2: torch.Tensor,
        min: torch.Tensor,
        max: torch.Tensor,
    ) -> None:
        #: How many values each feature reduced.
        self.count = count
        #: Per-feature mean.
        self.mean = mean
        #: Per-feature sum of squared deviations from the mean.
        self.m2 = m2
        #: Per-feature minimum.
        self.min = min
        #: Per-feature maximum.
        self.max = max

    @classmethod
    def of(cls, tensor: torch.Tensor, dim: Optional[int] = -1) -> Moments:
        """The statistics of ``tensor``, keeping ``dim`` (``None``: one scalar).

        Example:
            >>> import torch
            >>> from hookbus.torch import Moments
            >>> Moments.of(torch.tensor([[1.0, 10.0], [3.0, 30.0]])).mean
            tensor([ 2., 20.], dtype=torch.float64)
        """
        flat = flatten(tensor.detach(), dim, "tensor")
        if flat.shape[0] == 0:
            raise ValueError(
                f"Moments.of() needs values, got a tensor of shape {tuple(tensor.shape)}"
            )
        shift = torch.mean(flat, 0, dtype=F64)
        deviation = torch.sub(flat, shift)
        s1, s2 = deviation.sum(0), vecdot(deviation, deviation, dim=0)
        low, high = torch.amin(flat, 0).to(F64), torch.amax(flat, 0).to(F64)
        return merge_window(None, None, flat.shape[0], shift, s1, s2, low, high)[0]

    @property
    def var(self) -> torch.Tensor:
        """Per-feature population variance (``m2 / count``)."""
        return self.m2 / self.count

    @property
    def std(self) -> torch.Tensor:
        """Per-feature population standard deviation."""
        return self.var.sqrt()

    @property
    def shape(self) -> Tuple[int, ...]:
        """The feature shape: ``(features,)``, or ``()`` for a scalar statistic."""
        return tuple(self.mean.shape)

    def merge(self, other: Moments) -> Moments:
        """The statistics of both sets of values together (Chan's formula), exactly.

        Exact to float64 rounding while a feature's ``|mean| / std`` stays below
        about 1e6 (float32 data have no spread left beyond ~1e7); past that, the
        rounding of the two stored means shows, as about ``1e-16 * |mean| / std``.

        Example:
            >>> import torch
            >>> from hookbus.torch import Moments
            >>> Moments.of(torch.zeros(2, 1)).merge(Moments.of(torch.ones(2, 1))).std
            tensor([0.5000], dtype=torch.float64)
        """
        if other.shape != self.shape:
            raise ValueError(
                f"cannot merge statistics of feature shape {self.shape} with {other.shape}"
            )
        count = self.count + other.count
        delta = other.mean - self.mean
        return Moments(
            count,
            self.mean + delta * (other.count / count),
            self.m2 + other.m2 + delta * delta * (self.count * other.count / count),
            torch.minimum(self.min, other.min),
            torch.maximum(self.max, other.max),
        )

    def __repr__(self) -> str:
        return f"<Moments count={self.count} shape={self.shape}>"


def flatten(tensor: torch.Tensor, dim: Optional[int], what: str) -> torch.Tensor:
    """``tensor`` as (values, *features): the feature dim last, the rest flattened."""
    if dim is None:  # float64 now: a 0-dim shift would not promote the subtraction
        return tensor.reshape(-1).to(F64)
    ndim = tensor.dim()
    kept = dim + ndim if dim < 0 else dim
    if not 0 <= kept < ndim:
        raise ValueError(
            f"stats(dim={dim}) is out of range for {what}: its shape is "
            f"{tuple(tensor.shape)} ({ndim} dims, so dim is accepted from {-ndim} to "
            f"{ndim - 1}); pass another dim=, or dim=None for one scalar"
            if ndim
            else f"stats(dim={dim}) is out of range for {what}: it is a scalar (shape ()); "
            f"pass dim=None"
        )
    if kept == 1 and ndim == 2:
        return tensor
    if kept != ndim - 1:
        tensor = tensor.movedim(kept, -1)
    return tensor.reshape(-1, tensor.shape[-1])


def merge_window(
    stat: Optional[Moments],
    error: Optional[torch.Tensor],
    count: int,
    shift: torch.Tensor,
    s1: torch.Tensor,
    s2: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
) -> Tuple[Moments, torch.Tensor]:
    """``stat`` (may be None) with a window of ``count`` values merged in, and the new
    mean's rounding error.

    The window holds the sums of ``x - shift`` (``s1``) and of its square (``s2``).
    ``M2 = s2 - s1^2 / count`` cancels nothing much, as the shift is the mean of
    everything before (or, at first, of the first call). The window then joins the
    statistics by Chan's formula, in shifted terms. The stored mean is rounded;
    ``error`` (true mean - stored mean, kept by an exact two-sum) keeps that
    rounding out of the next window's distance to it, which matters for values far
    from zero with a tiny spread.
    """
    offset = s1 / count  # the window's mean minus the shift
    m2 = s2 - s1 * offset
    if stat is None:
        mean, error = _two_sum(shift, offset)
        return Moments(count, mean, m2, low, high), error
    total = stat.count + count
    delta = offset if shift is stat.mean else offset + (shift - stat.mean)
    if error is not None:
        delta = delta - error
    mean, error = _two_sum(
        stat.mean, delta * (count / total) + (error if error is not None else 0.0)
    )
    merged = Moments(
        total,
        mean,
        stat.m2 + m2 + delta * delta * (stat.count * count / total),
        torch.minimum(stat.min, low),
        torch.maximum(stat.max, high),
    )
    return merged, error


def _two_sum(a: torch.Tensor, b: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``a + b`` rounded, and exactly what the rounding lost (Knuth's two-sum)."""
    total = a + b
    b_part = total - a
    return total, (a - (total - b_part)) + (b - b_part)
