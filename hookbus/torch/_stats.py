"""``stats``: streaming per-feature statistics of what modules see, exact across ranks.

No activation is kept. Each call's tensor is reduced on the spot to one *row*:
its count, the float64 sums of ``x - shift`` and of its square, its min and max,
where ``shift`` is the mean of everything the module saw before (of the first
call, at first). Centred that way, ``M2 = S2 - S1^2 / n`` does not cancel as the
naive ``E[x^2] - E[x]^2`` does. The hook writes the row in place into a buffer
allocated at the module's first call (``_ROW_BUDGET``); when the buffer is full
the rows are merged into the module's :class:`Stat` as one window, by Chan's
formula, and the shift moves to the new mean. Writing in place and merging
seldom is what keeps a hook at five torch ops and no allocation but one per
call; anything that reads the statistics merges first.

``Stats.reduce`` lives in ``_distributed.py``, with the other collectives.
"""

from __future__ import annotations

import difflib
import threading
from types import TracebackType
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Tuple,
    Type,
)

import torch
from torch import nn

from .._bus import EventBus
from .._context import CallContext
from .._handle import Handle
from ._attach import Attachment, Selector, attach, find_attachment
from ._tree import Path, iter_tensors

__all__ = ["OF", "Stat", "Stats", "stats"]

OF = ("output", "input", "grad")
"""What :func:`stats` can watch: a module's output, its first tensor argument, or
the gradient of its output."""

_F64 = torch.float64

# A module's buffer holds this many numbers per statistic (2 x 8 bytes plus twice
# the input's item size each: 96 KiB for float32) and 64 rows at most: small
# features wait longer, where a merge per call would cost more than the call.
_ROW_BUDGET = 4096
_MAX_ROWS = 64

_vecdot: Callable[..., torch.Tensor] = torch.linalg.vecdot  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]


class Stat:
    """Statistics of one module, per feature, in float64: ``count``, ``mean``, ``var``...

    ``count`` is the number of values reduced into each feature (the same for all
    features); ``mean``, ``var`` (population variance), ``std``, ``min`` and
    ``max`` are float64 tensors of the feature shape (``(features,)``, or ``()``
    with ``dim=None``). ``m2`` is the sum of squared deviations from the mean,
    what exact merging needs. A ``Stat`` never changes: the running statistics
    replace it with a new one.

    Example:
        >>> import torch
        >>> from hookbus.torch import Stat
        >>> a = Stat.of(torch.tensor([[1.0], [2.0]]))
        >>> b = Stat.of(torch.tensor([[3.0], [4.0], [5.0]]))
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
    def of(cls, tensor: torch.Tensor, dim: Optional[int] = -1) -> Stat:
        """The statistics of ``tensor``, keeping ``dim`` (``None``: one scalar).

        Example:
            >>> import torch
            >>> from hookbus.torch import Stat
            >>> Stat.of(torch.tensor([[1.0, 10.0], [3.0, 30.0]])).mean
            tensor([ 2., 20.], dtype=torch.float64)
        """
        flat = _flatten(tensor.detach(), dim, "tensor")
        if flat.shape[0] == 0:
            raise ValueError(
                f"Stat.of() needs values, got a tensor of shape {tuple(tensor.shape)}"
            )
        shift = torch.mean(flat, 0, dtype=_F64)
        deviation = torch.sub(flat, shift)
        s1, s2 = deviation.sum(0), _vecdot(deviation, deviation, dim=0)
        low, high = torch.amin(flat, 0).to(_F64), torch.amax(flat, 0).to(_F64)
        return _merge_window(None, None, flat.shape[0], shift, s1, s2, low, high)[0]

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

    def merge(self, other: Stat) -> Stat:
        """The statistics of both sets of values together (Chan's formula), exactly.

        Example:
            >>> import torch
            >>> from hookbus.torch import Stat
            >>> Stat.of(torch.zeros(2, 1)).merge(Stat.of(torch.ones(2, 1))).std
            tensor([0.5000], dtype=torch.float64)
        """
        if other.shape != self.shape:
            raise ValueError(
                f"cannot merge statistics of feature shape {self.shape} with {other.shape}"
            )
        count = self.count + other.count
        delta = other.mean - self.mean
        return Stat(
            count,
            self.mean + delta * (other.count / count),
            self.m2 + other.m2 + delta * delta * (self.count * other.count / count),
            torch.minimum(self.min, other.min),
            torch.maximum(self.max, other.max),
        )

    def __repr__(self) -> str:
        return f"<Stat count={self.count} shape={self.shape}>"


def stats(
    model: nn.Module,
    selector: Selector = "*",
    *,
    of: str = "output",
    dim: Optional[int] = -1,
    bus: Optional[EventBus] = None,
) -> Stats:
    """Stream per-feature statistics of what the selected modules see; keep no activation.

    A context manager: entering starts it and yields the :class:`Stats`, a
    read-only mapping from module name to :class:`Stat`; leaving removes its hooks
    (the statistics stay readable). Without ``with``, call ``start()`` and
    ``stop()``.

    * ``selector``: a name or glob, a module, a module type or a list of those
      (see :class:`Attachment`); by default every module. Matching nothing is a
      ``ValueError`` listing close names.
    * ``of``: ``"output"``, ``"input"`` (the first positional tensor argument) or
      ``"grad"`` (the gradient of the output, through tensor hooks at backward).
      Of a nested output, the first floating-point tensor is used.
    * ``dim``: the feature dimension, kept; every other one is reduced over.
      ``dim=None`` reduces everything to a scalar. Out of range for a module's
      tensor, it raises at that module's first call.
    * ``bus``: the bus to put the hooks on (default: a private one); a model
      already attached to it is used with that attachment's names.

    Every call of a module counts, a module called twice per forward included.
    Tensors that are not floating point, and calls with no tensor, are skipped;
    ``repr`` and :attr:`Stats.skipped` say which.

    Example:
        >>> import torch, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
        >>> with hookbus.torch.stats(model, nn.Linear) as st:
        ...     for _ in range(5):
        ...         _ = model(torch.randn(8, 4))
        >>> st["0"].count, st["0"].mean.shape, st["0"].mean.dtype
        (40, torch.Size([3]), torch.float64)
    """
    return Stats(model, selector, of=of, dim=dim, bus=bus)


class _Feed:
    """One module's running statistics, its buffer of pending rows, and its hooks.

    A row (one call) is written in place into preallocated buffers, so the hook
    allocates nothing but the deviation and a merge is a few ops on contiguous
    memory. The lock covers writing a row and merging, so a row is never half
    written when merged, and every buffered row has the current shift.
    """

    __slots__ = (
        "count", "dtype", "empty", "error", "extremes", "features", "filled", "grad_path",
        "highs", "limit", "lows", "name", "owner", "plain", "s1s", "s2s", "seen", "shift",
        "stat", "sums", "what",
    )  # fmt: skip

    def __init__(self, owner: Stats, name: str) -> None:
        self.owner = owner
        self.name = name
        self.what = "gradient" if owner.of == "grad" else owner.of
        self.stat: Optional[Stat] = None
        self.shift: Optional[torch.Tensor] = None  # what the buffered rows are centred on
        self.error: Optional[torch.Tensor] = None  # the true mean - stat.mean (rounding)
        self.features: Optional[Tuple[int, ...]] = None  # the feature shape, once seen
        self.grad_path: Optional[Path] = None  # of="grad": the output tensor watched
        self.seen: Optional[torch.Size] = None  # the last shape checked
        self.dtype: Optional[torch.dtype] = None  # and dtype
        self.plain = False  # that shape is (values, features) already
        self.empty = False  # that shape holds no value
        # The buffer: rows of sums of (x - shift) and of its square (float64), and of
        # min and max (the input dtype); ``filled`` rows hold ``count`` values.
        self.limit = 0
        self.filled = 0
        self.count = 0
        self.sums: Optional[torch.Tensor] = None
        self.extremes: Optional[torch.Tensor] = None
        self.s1s: List[torch.Tensor] = []
        self.s2s: List[torch.Tensor] = []
        self.lows: List[torch.Tensor] = []
        self.highs: List[torch.Tensor] = []

    # --- hooks: each runs on every call of its module ----------------------------------

    def on_output(self, ctx: CallContext) -> None:
        self.add(ctx.result)

    def on_input(self, ctx: CallContext) -> None:
        for arg in ctx.args:
            if isinstance(arg, torch.Tensor):
                self.add(arg)
                return
        self.owner._skip(self.name, "no positional tensor argument")

    def on_grad_output(self, ctx: CallContext) -> None:
        # Which tensor of the output is watched: its gradient comes with this path.
        self.grad_path = next(
            (path for path, t in iter_tensors(ctx.result) if t.is_floating_point()), None
        )

    def on_grad(self, ctx: CallContext) -> None:
        if ctx.data["path"] == self.grad_path:
            self.add(ctx.result)

    def add(self, value: Any) -> None:
        owner = self.owner
        if owner._paused:
            return
        if type(value) is not torch.Tensor or value.requires_grad or not value.is_floating_point():
            usable = self._usable(value)
            if usable is None:
                return
            value = usable
        if value.shape != self.seen or value.dtype is not self.dtype:
            self._see(value)
        if self.empty:
            return
        flat = value if self.plain else _flatten(value, owner.dim, "")
        with owner._lock:
            shift = self.shift
            if shift is None:  # the first call: shift by its own mean
                shift = self.shift = torch.mean(flat, 0, dtype=_F64)
            deviation = torch.sub(flat, shift)  # float64, as shift is
            at = self.filled
            torch.sum(deviation, 0, out=self.s1s[at])
            _vecdot(deviation, deviation, dim=0, out=self.s2s[at])
            torch.amin(flat, 0, out=self.lows[at])
            torch.amax(flat, 0, out=self.highs[at])
            self.count += flat.shape[0]
            self.filled = at + 1
            if at + 1 == self.limit:
                self.merge_locked()

    # --- the rare paths ----------------------------------------------------------------

    def _usable(self, value: Any) -> Optional[torch.Tensor]:
        """The tensor to reduce (detached), or None after noting why there is none."""
        if not isinstance(value, torch.Tensor):
            tensors = [t for _, t in iter_tensors(value)]
            value = next((t for t in tensors if t.is_floating_point()), None)
            if value is None:
                kinds = sorted({str(t.dtype)[6:] for t in tensors})
                what = f"{'/'.join(kinds)} tensors" if kinds else "tensor"
                self.owner._skip(self.name, f"no floating-point {what} in its {self.what}")
                return None
        if not value.is_floating_point():
            self.owner._skip(self.name, f"{str(value.dtype)[6:]} {self.what}")
            return None
        detached: torch.Tensor = value.detach()
        return detached

    def _see(self, value: torch.Tensor) -> None:
        """Check a new shape or dtype: ``dim`` in range, the feature size as before."""
        dim = self.owner.dim
        flat = _flatten(value, dim, f"the {self.what} of module {self.name!r}")
        features = tuple(flat.shape[1:])
        if self.features is not None and features != self.features:
            raise ValueError(
                f"stats(dim={dim}): the {self.what} of module {self.name!r} has shape "
                f"{tuple(value.shape)}, so {features} features, but earlier calls had "
                f"{self.features}: the feature dimension must keep its size (pick another dim=, "
                f"or dim=None)"
            )
        with self.owner._lock:
            if self.features is None or flat.dtype != self.extremes_dtype():
                self.merge_locked()
                self._allocate(features, flat)
        self.seen = value.shape
        self.dtype = value.dtype
        self.plain = flat is value
        self.empty = value.numel() == 0

    def extremes_dtype(self) -> Optional[torch.dtype]:
        return self.extremes.dtype if self.extremes is not None else None

    def _allocate(self, features: Tuple[int, ...], flat: torch.Tensor) -> None:
        numel = 1
        for size in features:
            numel *= size
        self.features = features
        self.limit = limit = min(_MAX_ROWS, max(1, _ROW_BUDGET // max(numel, 1)))
        self.sums = torch.zeros((2, limit, *features), dtype=_F64, device=flat.device)
        self.extremes = torch.zeros((2, limit, *features), dtype=flat.dtype, device=flat.device)
        self.s1s, self.s2s = list(self.sums[0].unbind(0)), list(self.sums[1].unbind(0))
        self.lows, self.highs = list(self.extremes[0].unbind(0)), list(self.extremes[1].unbind(0))

    def merge_locked(self) -> None:
        """Merge the buffered rows into the statistics (the owner's lock held)."""
        filled = self.filled
        if not filled:
            return
        assert self.sums is not None
        assert self.extremes is not None
        assert self.shift is not None
        s1, s2 = self.sums[:, :filled].sum(1)
        low = self.extremes[0, :filled].amin(0).to(_F64)
        high = self.extremes[1, :filled].amax(0).to(_F64)
        self.stat, self.error = _merge_window(
            self.stat, self.error, self.count, self.shift, s1, s2, low, high
        )
        self.shift = self.stat.mean  # the next rows are centred on all data so far
        self.filled = self.count = 0

    def flush(self) -> Optional[Stat]:
        """Merge the pending rows into the statistics; return them."""
        with self.owner._lock:
            self.merge_locked()
            return self.stat

    def forget_locked(self) -> None:
        self.filled = self.count = 0
        self.stat = self.shift = self.error = None


def _flatten(tensor: torch.Tensor, dim: Optional[int], what: str) -> torch.Tensor:
    """``tensor`` as (values, *features): the feature dim last, the rest flattened."""
    if dim is None:  # float64 now: a 0-dim shift would not promote the subtraction
        return tensor.reshape(-1).to(_F64)
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


def _merge_window(
    stat: Optional[Stat],
    error: Optional[torch.Tensor],
    count: int,
    shift: torch.Tensor,
    s1: torch.Tensor,
    s2: torch.Tensor,
    low: torch.Tensor,
    high: torch.Tensor,
) -> Tuple[Stat, torch.Tensor]:
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
        return Stat(count, mean, m2, low, high), error
    total = stat.count + count
    delta = offset if shift is stat.mean else offset + (shift - stat.mean)
    if error is not None:
        delta = delta - error
    mean, error = _two_sum(
        stat.mean, delta * (count / total) + (error if error is not None else 0.0)
    )
    merged = Stat(
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


class Stats(Mapping[str, Stat]):
    """Running per-feature statistics of the selected modules: module name -> :class:`Stat`.

    Made by :func:`stats`. Keys are the selected modules that ran (reading one
    that did not raises a ``KeyError`` saying so), in model order;
    :attr:`selected` lists them all.

    * ``start()`` / ``stop()``, or ``with``: add and remove the hooks. After
      ``stop()`` the statistics stay readable, and ``start()`` continues them.
    * ``pause()``: ignore calls until ``resume()`` (or the end of ``with
      stats.pause():``); pauses nest.
    * ``reset()`` forgets everything; ``merge(other)`` adds another ``Stats`` of
      the same kind; ``state_dict()`` / ``load_state_dict()`` round-trip exactly.
    * ``reduce(group=None)``: combine every rank's statistics, see :meth:`reduce`.

    Example:
        >>> import torch, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 2), nn.Embedding(3, 2))
        >>> st = hookbus.torch.stats(model, of="input", dim=None)
        >>> st.start()
        >>> _ = model[0](torch.ones(4, 2)); _ = model[1](torch.tensor([0, 1]))
        >>> with st.pause():
        ...     _ = model[0](torch.zeros(4, 2))
        >>> st.stop()
        >>> st["0"].count, st["0"].mean
        (8, tensor(1., dtype=torch.float64))
        >>> st
        <Stats of='input' dim=None, 1 of 3 modules; skipped: '1' (int64 input)>
    """

    def __init__(
        self,
        model: nn.Module,
        selector: Selector = "*",
        *,
        of: str = "output",
        dim: Optional[int] = -1,
        bus: Optional[EventBus] = None,
    ) -> None:
        if of not in OF:
            raise ValueError(
                f"stats(of={of!r}) is not one of the accepted values: {', '.join(map(repr, OF))}"
            )
        if dim is not None and (not isinstance(dim, int) or isinstance(dim, bool)):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f"stats(dim=) takes an int (the feature dimension, e.g. -1) or None "
                f"(reduce to one scalar), got {type(dim).__name__} {dim!r}"
            )
        if bus is not None and not isinstance(bus, EventBus):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"stats(bus=) takes a hookbus.EventBus, got {type(bus).__name__}")
        self.of = of
        self.dim = dim
        self._model = model
        self._bus = bus
        self._lock = threading.RLock()
        self._paused = 0
        self._reduced = False
        self._handles: List[Handle] = []
        self._attachment: Optional[Attachment] = None
        self._owned = False
        self._skipped: Dict[str, str] = {}
        attachment, owned = self._attach()
        try:
            names = attachment.select(selector)
        finally:
            if owned:
                attachment.detach()
        self._selected = names
        self._feeds = {name: _Feed(self, name) for name in names}

    # --- starting and stopping ---------------------------------------------------------

    def _attach(self) -> Tuple[Attachment, bool]:
        if self._bus is None:
            return attach(self._model, EventBus("stats")), True
        found = find_attachment(self._model, self._bus)
        if found is not None:
            return found, False
        return attach(self._model, self._bus), True

    @property
    def active(self) -> bool:
        """Whether the hooks are in place (between ``start()`` and ``stop()``)."""
        return self._attachment is not None

    def start(self) -> None:
        """Add the hooks; the statistics continue from where they are."""
        if self._attachment is not None:
            raise RuntimeError(f"{self!r} is already started; stop() it first")
        attachment, owned = self._attach()
        handles: List[Handle] = []
        try:
            for name in self._selected:
                feed, module = self._feeds[name], attachment.module(name)
                if self.of == "output":
                    handles.append(attachment.post(module, feed.on_output))
                elif self.of == "input":
                    handles.append(attachment.pre(module, feed.on_input))
                else:
                    handles.append(attachment.post(module, feed.on_grad_output))
                    handles.append(attachment.grad(module, feed.on_grad))
        except BaseException:
            for handle in handles:
                handle.remove()
            if owned:
                attachment.detach()
            raise
        self._attachment, self._owned, self._handles = attachment, owned, handles

    def stop(self) -> None:
        """Remove the hooks (idempotent); the statistics stay readable."""
        attachment, self._attachment = self._attachment, None
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.remove()
        if attachment is not None and self._owned:
            attachment.detach()
        self._flush()

    def __enter__(self) -> Stats:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.stop()

    def pause(self) -> _Resume:
        """Ignore calls until :meth:`resume`, or the end of ``with stats.pause():``.

        Example:
            >>> import torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Identity())
            >>> with hookbus.torch.stats(model, "0") as st:
            ...     _ = model(torch.ones(1, 2))
            ...     with st.pause():
            ...         _ = model(torch.ones(5, 2))
            >>> st["0"].count
            1
        """
        with self._lock:
            self._paused += 1
        return _Resume(self)

    def resume(self) -> None:
        """End one :meth:`pause`."""
        with self._lock:
            if self._paused == 0:
                raise RuntimeError(f"{self!r} is not paused")
            self._paused -= 1

    @property
    def paused(self) -> bool:
        """Whether calls are being ignored."""
        return self._paused > 0

    # --- the mapping -------------------------------------------------------------------

    @property
    def selected(self) -> List[str]:
        """Every selected module's name, in model order, whether it ran or not."""
        return list(self._selected)

    @property
    def skipped(self) -> Dict[str, str]:
        """Modules whose calls were skipped, and why (a non-float tensor, no tensor)."""
        with self._lock:
            return dict(self._skipped)

    def __getitem__(self, name: str) -> Stat:
        feed = self._feeds.get(name)
        stat = feed.flush() if feed is not None else None
        if stat is not None:
            return stat
        if feed is not None:
            why = self._skipped.get(name)
            raise KeyError(
                f"module {name!r} was selected but has no statistics"
                + (f": its calls were skipped ({why})" if why else ": it has not run")
            )
        close = difflib.get_close_matches(name, self._selected, n=5, cutoff=0.5)
        hint = f"; close names: {', '.join(map(repr, close))}" if close else ""
        raise KeyError(f"module {name!r} was not selected{hint}")

    def __iter__(self) -> Iterator[str]:
        return iter([name for name in self._selected if self._has(name)])

    def __len__(self) -> int:
        return sum(1 for name in self._selected if self._has(name))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._feeds and self._has(name)

    def _has(self, name: str) -> bool:
        feed = self._feeds[name]
        return feed.stat is not None or feed.filled > 0

    def _flush(self) -> None:
        for feed in self._feeds.values():
            feed.flush()

    def _skip(self, name: str, why: str) -> None:
        if self._skipped.get(name) != why:
            with self._lock:
                self._skipped[name] = why

    # --- combining ---------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every statistic and note (the hooks stay)."""
        with self._lock:
            for feed in self._feeds.values():
                feed.forget_locked()
            self._skipped.clear()
            self._reduced = False

    def merge(self, other: Stats) -> None:
        """Add ``other``'s statistics to these, exactly (same ``of`` and ``dim``).

        Example:
            >>> import torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Identity())
            >>> with hookbus.torch.stats(model, "0") as a:
            ...     _ = model(torch.zeros(2, 1))
            >>> with hookbus.torch.stats(model, "0") as b:
            ...     _ = model(torch.ones(2, 1))
            >>> a.merge(b)
            >>> a["0"].count, a["0"].mean
            (4, tensor([0.5000], dtype=torch.float64))
        """
        if not isinstance(other, Stats):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"merge() takes a Stats, got {type(other).__name__}")
        self._check_kind(other.of, other.dim, "merge")
        incoming = {name: other[name] for name in other}
        self._check_names(incoming, "merge")
        with self._lock:
            for name, stat in incoming.items():
                self._set(name, stat, add=True)

    def state_dict(self) -> Dict[str, Any]:
        """The statistics as plain values and tensors (for ``torch.save``).

        Example:
            >>> import torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Identity())
            >>> with hookbus.torch.stats(model, "0") as st:
            ...     _ = model(torch.randn(3, 2))
            >>> copy = hookbus.torch.stats(model, "0")
            >>> copy.load_state_dict(st.state_dict())
            >>> torch.equal(copy["0"].m2, st["0"].m2)
            True
        """
        return {
            "of": self.of,
            "dim": self.dim,
            "reduced": self._reduced,
            "skipped": self.skipped,
            "stats": {
                name: {
                    "count": stat.count,
                    "mean": stat.mean.clone(),
                    "m2": stat.m2.clone(),
                    "min": stat.min.clone(),
                    "max": stat.max.clone(),
                }
                for name, stat in self.items()
            },
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the statistics by those of a :meth:`state_dict`."""
        missing = {"of", "dim", "stats"} - set(state)
        if missing:
            raise ValueError(
                f"not a Stats state_dict: it lacks {', '.join(sorted(missing))}; "
                f"accepted: the dict that Stats.state_dict() returns"
            )
        self._check_kind(state["of"], state["dim"], "load_state_dict")
        loaded: Dict[str, Stat] = {}
        for name, fields in state["stats"].items():
            loaded[name] = Stat(
                int(fields["count"]),
                *(torch.as_tensor(fields[key], dtype=_F64).clone() for key in _TENSORS),
            )
        self._check_names(loaded, "load_state_dict")
        with self._lock:
            self.reset()
            for name, stat in loaded.items():
                self._set(name, stat, add=False)
            self._skipped.update(state.get("skipped", {}))
            self._reduced = bool(state.get("reduced", False))

    def reduce(self, group: Any = None) -> None:
        """Combine the statistics of every rank of ``group`` in place; all ranks end equal.

        The result is exactly that of one process over all ranks' data (float64,
        to rounding), whatever the batch sizes. Every rank of the group must call
        it, at the same point: it runs the same four collectives on every rank,
        over the selected names sorted, with empty statistics for modules that did
        not run there, so a module that ran on some ranks only cannot make it hang.
        The collectives: one ``MAX`` all_reduce of the feature sizes (a rank where
        a module never ran does not know them), one ``SUM`` of the counts and sums
        (the global mean), one ``SUM`` of the M2 terms centred on that mean (what
        keeps it exact; a single sum of squares would cancel), and one ``MAX`` of
        max and -min, overlapped with the first ``SUM``. Their size grows with
        the features, never with the world size.

        Raises ``RuntimeError`` without an initialized process group, when this
        rank is not in ``group``, or on statistics reduced already (reducing
        twice would count them once per rank: ``reset()`` in between); raises
        ``ValueError`` on every rank when the ranks disagree on the modules or
        their feature sizes.
        """
        from ._distributed import reduce_stats

        with self._lock:
            if self._reduced:
                raise RuntimeError(
                    f"{self!r} holds statistics reduced across ranks already; reducing them "
                    f"again would count them once per rank. reset() after reading them, "
                    f"or keep a state_dict() of the local statistics to reduce a copy"
                )
            self._flush()
            names = sorted(self._selected)
            local = {name: self._feeds[name].stat for name in names}
            shapes = {name: self._feeds[name].features for name in names}
        merged = reduce_stats(names, local, shapes, (self.of, self.dim), group)
        with self._lock:
            for name, stat in merged.items():
                feed = self._feeds[name]
                feed.forget_locked()
                feed.stat = stat
                feed.shift = stat.mean if stat is not None else None
                if stat is not None:
                    feed.features = stat.shape if self.dim is not None else ()
            self._reduced = True

    def _set(self, name: str, stat: Stat, *, add: bool) -> None:
        feed = self._feeds[name]
        current = feed.flush() if add else None
        feed.stat = stat if current is None else current.merge(stat)
        feed.shift, feed.error = feed.stat.mean, None
        feed.features = stat.shape

    def _check_kind(self, of: Any, dim: Any, what: str) -> None:
        if (of, dim) != (self.of, self.dim):
            raise ValueError(
                f"{what}(): these statistics are of={self.of!r} dim={self.dim!r}, the others "
                f"of={of!r} dim={dim!r}; only statistics of the same kind combine"
            )

    def _check_names(self, incoming: Mapping[str, Stat], what: str) -> None:
        unknown = [name for name in incoming if name not in self._feeds]
        if unknown:
            raise ValueError(
                f"{what}(): modules {', '.join(map(repr, unknown))} are not selected here; "
                f"selected: {', '.join(map(repr, self._selected))}"
            )
        for name, stat in incoming.items():
            features = self._feeds[name].features
            if features is not None and stat.shape != features:
                raise ValueError(
                    f"{what}(): module {name!r} has feature shape {features} here and "
                    f"{stat.shape} in the other statistics"
                )

    def __repr__(self) -> str:
        ran = len(self)
        text = f"<Stats of={self.of!r} dim={self.dim!r}, {ran} of {len(self._selected)} modules"
        skipped = self.skipped
        if skipped:
            text += "; skipped: " + ", ".join(f"{n!r} ({why})" for n, why in skipped.items())
        if self._reduced:
            text += "; reduced across ranks"
        return text + ">"


_TENSORS = ("mean", "m2", "min", "max")


class _Resume:
    """What :meth:`Stats.pause` returns: ``with`` it to resume at the end of the block."""

    __slots__ = ("_stats",)

    def __init__(self, owner: Stats) -> None:
        self._stats: Optional[Stats] = owner

    def __enter__(self) -> _Resume:
        return self

    def __exit__(self, *exc_info: object) -> None:
        owner, self._stats = self._stats, None
        if owner is not None:
            owner.resume()
