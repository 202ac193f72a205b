"""One module's running statistics: the hooks that feed them and their row buffer.

Each call's tensor is reduced on the spot to one *row*: its count, the float64
sums of ``x - shift`` and of its square, its min and max, where ``shift`` is the
mean of everything the module saw before (of the first call, at first). Centred
that way, ``M2 = S2 - S1^2 / n`` does not cancel as the naive
``E[x^2] - E[x]^2`` does. The hook writes the row in place into a buffer
allocated at the module's first call (``_ROW_BUDGET``); when the buffer is full
the rows are merged into the module's :class:`Moments` as one window, and the shift
moves to the new mean. Writing in place and merging seldom is what keeps a hook
at five torch ops and one allocation per call; anything that reads the
statistics merges first. No activation is kept.

A feed holds its ``Stats``'s :class:`FeedState` (lock, pause count, notes), not
the ``Stats``: the ``Stats`` holds its feeds, so a reference back would make a
cycle that keeps a stopped and dropped ``Stats``, and its buffers, until the
garbage collector runs.

Float dtypes without full arithmetic in torch (float8) are upcast to float32,
exactly, before reducing; one that cannot even be converted (the packed
``float4_e2m1fn_x2``) is skipped with a note.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch.utils.hooks import RemovableHandle

from ..adapter import CallContext
from ._moments import F64, Moments, flatten, merge_window, vecdot
from ._tree import Path, iter_tensors

__all__ = ["Feed", "FeedState"]

# A module's buffer holds this many numbers per statistic (2 x 8 bytes plus twice
# the input's item size each: 96 KiB for float32) and 64 rows at most: small
# features wait longer, where a merge per call would cost more than the call.
_ROW_BUDGET = 4096
_MAX_ROWS = 64

# Reduced as they come; any other float dtype is upcast to float32 first, or skipped.
_NATIVE = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64))
_converts: Dict[torch.dtype, bool] = {}  # dtype -> whether torch converts it to float32


def _has_arithmetic(dtype: torch.dtype) -> bool:
    known = _converts.get(dtype)
    if known is None:
        try:
            torch.zeros(1).to(dtype).to(torch.float32)
            known = True
        except (RuntimeError, NotImplementedError, TypeError):
            known = False
        _converts[dtype] = known
    return known


class FeedState:
    """What a ``Stats`` shares with its feeds: kind, lock, pause count and skip notes.

    The feeds hold this, never the ``Stats`` (see the module docstring).
    """

    __slots__ = ("dim", "lock", "of", "paused", "skipped")

    def __init__(self, of: str, dim: Optional[int]) -> None:
        self.of = of
        self.dim = dim
        self.lock = threading.RLock()
        self.paused = 0
        self.skipped: Dict[str, str] = {}

    def skip(self, name: str, why: str) -> None:
        if self.skipped.get(name) != why:
            with self.lock:
                self.skipped[name] = why


class Feed:
    """One module's running statistics, its buffer of pending rows, and its hooks.

    A row (one call) is written in place into preallocated buffers, so the hook
    allocates nothing but the deviation and a merge is a few ops on contiguous
    memory. The lock covers writing a row and merging, so a row is never half
    written when merged, and every buffered row has the current shift.
    """

    __slots__ = (
        "count", "dtype", "empty", "error", "extremes", "features", "filled", "grad_handles",
        "grad_path", "highs", "limit", "lows", "module", "name", "owner", "plain", "s1s", "s2s",
        "seen", "shift", "stat", "sums", "upcast", "what",
    )  # fmt: skip

    def __init__(self, owner: FeedState, name: str) -> None:
        self.owner = owner
        self.name = name
        self.what = "gradient" if owner.of == "grad" else owner.of
        # The module watched, when the bus may carry another model with the same
        # names (a bus of the user's): calls of any other module are not counted.
        self.module: Optional[Callable[[], Optional[torch.nn.Module]]] = None
        self.stat: Optional[Moments] = None
        self.shift: Optional[torch.Tensor] = None  # what the buffered rows are centred on
        self.error: Optional[torch.Tensor] = None  # the true mean - stat.mean (rounding)
        self.features: Optional[Tuple[int, ...]] = None  # the feature shape, once seen
        self.grad_path: Optional[Path] = None  # of="grad": the output tensor watched
        self.grad_handles: List[RemovableHandle] = []  # of="grad" of a value: tensor hooks
        self.seen: Optional[torch.Size] = None  # the last shape checked
        self.dtype: Optional[torch.dtype] = None  # and dtype
        self.plain = False  # that shape is (values, features) already
        self.empty = False  # that shape holds no value (or that dtype cannot be reduced)
        self.upcast = False  # that dtype is reduced as float32 (float8)
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

    def watch(self, module: Optional[torch.nn.Module]) -> None:
        """Count the calls of ``module`` only (``None``: of whatever the hooks see)."""
        self.module = weakref.ref(module) if module is not None else None

    def on_output(self, ctx: CallContext) -> None:
        module = self.module
        if module is not None and ctx.target is not module():
            return
        self.add(ctx.result)

    def on_input(self, ctx: CallContext) -> None:
        module = self.module
        if module is not None and ctx.target is not module():
            return
        for arg in ctx.args:
            if isinstance(arg, torch.Tensor):
                self.add(arg)
                return
        self.owner.skip(self.name, "no positional tensor argument")

    def on_grad_output(self, ctx: CallContext) -> None:
        module = self.module
        if module is not None and ctx.target is not module():
            return
        # Which tensor of the output is watched: its gradient comes with this path.
        self.grad_path = next(
            (path for path, t in iter_tensors(ctx.result) if t.is_floating_point()), None
        )

    def on_grad(self, ctx: CallContext) -> None:
        module = self.module
        if module is not None and ctx.target is not module():
            return
        if ctx.data["path"] == self.grad_path:
            self.add(ctx.result)

    def add_grad(self, grad: torch.Tensor, call_index: int, path: Path) -> None:
        """A tensor hook's gradient (``of="grad"`` of a value), its handle in
        :attr:`grad_handles`."""
        self.add(grad)

    def drop_grad_hooks(self) -> None:
        """Remove the tensor hooks left on values whose backward has not run:
        statistics stopped before it count nothing of it."""
        handles, self.grad_handles = self.grad_handles, []
        for handle in handles:
            handle.remove()

    def add(self, value: Any) -> None:
        owner = self.owner
        if owner.paused:
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
        flat = value if self.plain else self._flat(value)
        with owner.lock:
            shift = self.shift
            if shift is None:  # the first call: shift by its own mean
                shift = self.shift = torch.mean(flat, 0, dtype=F64)
            deviation = torch.sub(flat, shift)  # float64, as shift is
            at = self.filled
            torch.sum(deviation, 0, out=self.s1s[at])
            vecdot(deviation, deviation, dim=0, out=self.s2s[at])
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
                self.owner.skip(self.name, f"no floating-point {what} in its {self.what}")
                return None
        if not value.is_floating_point():
            self.owner.skip(self.name, f"{str(value.dtype)[6:]} {self.what}")
            return None
        detached: torch.Tensor = value.detach()
        return detached

    def _flat(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` as (values, features), in a dtype torch reduces (the rare path)."""
        flat = flatten(value, self.owner.dim, "")
        return flat.to(torch.float32) if self.upcast else flat

    def _see(self, value: torch.Tensor) -> None:
        """Check a new shape or dtype: ``dim`` in range, the feature size as before."""
        dtype = value.dtype
        upcast = dtype not in _NATIVE
        if upcast and not _has_arithmetic(dtype):
            self.owner.skip(
                self.name, f"{str(dtype)[6:]} {self.what} (torch has no arithmetic for it)"
            )
            self.seen, self.dtype, self.empty = value.shape, dtype, True
            return
        dim = self.owner.dim
        flat = flatten(value, dim, f"the {self.what} of module {self.name!r}")
        if upcast:
            flat = flat.to(torch.float32)  # exact: float8 values are all float32 values
        features = tuple(flat.shape[1:])
        if self.features is not None and features != self.features:
            raise ValueError(
                f"stats(dim={dim}): the {self.what} of module {self.name!r} has shape "
                f"{tuple(value.shape)}, so {features} features, but earlier calls had "
                f"{self.features}: the feature dimension must keep its size (pick another dim=, "
                f"or dim=None)"
            )
        with self.owner.lock:
            if self.features is None or flat.dtype != self.extremes_dtype():
                self.merge_locked()
                self._allocate(features, flat)
        self.seen = value.shape
        self.dtype = dtype
        self.upcast = upcast
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
        self.sums = torch.zeros((2, limit, *features), dtype=F64, device=flat.device)
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
        low = self.extremes[0, :filled].amin(0).to(F64)
        high = self.extremes[1, :filled].amax(0).to(F64)
        self.stat, self.error = merge_window(
            self.stat, self.error, self.count, self.shift, s1, s2, low, high
        )
        self.shift = self.stat.mean  # the next rows are centred on all data so far
        self.filled = self.count = 0

    def flush(self) -> Optional[Moments]:
        """Merge the pending rows into the statistics; return them."""
        with self.owner.lock:
            self.merge_locked()
            return self.stat

    def forget_locked(self) -> None:
        """Forget the statistics and the feature size (the next call may have another)."""
        self.filled = self.count = 0
        self.stat = self.shift = self.error = None
        # The next call checks its shape again and allocates for its own features.
        self.features = self.seen = self.dtype = None
