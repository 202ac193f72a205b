"""``stats``: streaming per-feature statistics of what modules see, exact across ranks.

:func:`stats` makes a :class:`Stats`, a read-only mapping from module name to
:class:`Moments` that adds and removes its hooks through :func:`attach`; each
selected module's statistics are kept by a ``Feed`` (``_feed.py``).
``Stats.reduce`` runs its collectives in ``_distributed.py``.
"""

from __future__ import annotations

import difflib
import threading
import weakref
from functools import partial
from types import TracebackType
from typing import (
    Any,
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

from ..adapter import CallContext, EventBus, Handle
from ._attach import Attachment, attach, find_attachment
from ._feed import Feed, FeedState
from ._grad import hook_output_grads
from ._moments import F64, Moments
from ._selection import Selector
from ._vocabulary import split_names

__all__ = ["OF", "Stats", "stats"]

OF = ("output", "input", "grad")
"""What :func:`stats` can watch: a module's output, its first tensor argument, or
the gradient of its output."""

# Attachments that a Stats made, and how many started Stats use each: two Stats on
# one bus share the model's attachment, and only the last one to stop detaches it.
_users: weakref.WeakKeyDictionary[Attachment, int] = weakref.WeakKeyDictionary()
_sharing = threading.Lock()


def _release(attachment: Attachment) -> None:
    """One Stats stops using ``attachment``, which a Stats made: the last detaches it."""
    with _sharing:
        left = _users.get(attachment, 1) - 1
        if left:
            _users[attachment] = left
        else:
            _users.pop(attachment, None)
    if not left:
        attachment.detach()


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
    read-only mapping from module name to :class:`Moments`; leaving removes its hooks
    (the statistics stay readable). Without ``with``, call ``start()`` and
    ``stop()``.

    * ``selector``: a name or glob, a module, a module type or a list of those
      (see :class:`Attachment`); by default every module. Matching nothing is a
      ``ValueError`` listing close names. Names of the vocabulary of
      :func:`attach`'s ``names=`` (``"blocks.*.hook_resid_post"``) select values: the
      model is attached with ``names="transformer"`` to a private bus while the
      statistics run (``of="input"`` and ``bus=`` apply to modules only).
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

    Of names of the vocabulary, on a Hugging Face model:

        >>> import transformers
        >>> config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=8, vocab_size=10)
        >>> gpt2 = transformers.GPT2LMHeadModel(config)
        >>> with hookbus.torch.stats(gpt2, "blocks.*.hook_resid_post") as st:
        ...     _ = gpt2(torch.tensor([[1, 2, 3]]))
        >>> list(st), st["blocks.1.hook_resid_post"].count
        (['blocks.0.hook_resid_post', 'blocks.1.hook_resid_post'], 3)
    """
    return Stats(model, selector, of=of, dim=dim, bus=bus)


def _hook_value_grad(feed: Feed, ctx: CallContext) -> None:
    """The post hook of a name of the vocabulary under ``of="grad"``: a tensor hook on its
    value hands the value's gradient to ``feed`` at backward."""
    value = ctx.result
    if type(value) is not torch.Tensor or not value.requires_grad:
        return  # no gradient will come (torch.no_grad(), or no tensor)
    if value._base is not None:
        # A view of a forward tensor (hook_z splits a projection's input by head) is on no
        # gradient's path: handing the forward this view puts it there.
        value = ctx.result = value.view_as(value)
    feed.grad_handles = hook_output_grads(value, feed.add_grad, 0, feed.grad_handles)


class Stats(Mapping[str, Moments]):
    """Running per-feature statistics of the selected modules: module name -> :class:`Moments`.

    Made by :func:`stats`. Keys are the selected modules that ran (reading one
    that did not raises a ``KeyError`` saying so), in model order;
    :attr:`selected` lists them all.

    * ``start()`` / ``stop()``, or ``with``: add and remove the hooks. After
      ``stop()`` the statistics stay readable, and ``start()`` continues them.
      They hold the model weakly: once it is gone, they stay readable, and
      ``start()`` raises.
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
        # Weak: the numbers often outlive the model, which start() alone needs again.
        self._model = weakref.ref(model)
        self._bus = bus
        # Shared with the feeds, which never hold this Stats (no cycle: see _feed.py).
        self._state = state = FeedState(of, dim)
        self._lock = state.lock
        self._skipped = state.skipped
        self._reduced = False
        self._handles: List[Handle] = []
        self._attachment: Optional[Attachment] = None
        self._owned = False
        # Names of the vocabulary the selector holds, and what it selects of modules.
        values, module_selector = split_names(model, selector)
        if values and of == "input":
            raise ValueError(
                "stats(of='input') applies to modules: a name of the vocabulary is one "
                "value (watch it with of='output', or its gradient with of='grad')"
            )
        if values and bus is not None:
            raise ValueError(
                "stats(bus=) applies to modules: names of the vocabulary are read through "
                "a private attachment of the model with names='transformer' (leave bus= out)"
            )
        self._values = values
        modules: List[str] = []
        if module_selector is not None:
            attachment, owned = self._attach()
            try:
                modules = attachment.select(module_selector)
            finally:
                if owned:
                    _release(attachment)
        self._selected = modules + values
        self._feeds = {name: Feed(state, name) for name in self._selected}

    # --- starting and stopping ---------------------------------------------------------

    def _attach(self) -> Tuple[Attachment, bool]:
        model = self._model()
        if model is None:
            raise RuntimeError(
                f"{self!r} cannot start: the model its statistics were taken on no longer "
                f"exists (statistics hold their model weakly); the numbers stay readable"
            )
        if self._bus is None:  # private: _release detaches it
            return attach(
                model, EventBus("stats"), names="transformer" if self._values else None
            ), True
        with _sharing:
            found = find_attachment(model, self._bus)
            if found is None:
                found = attach(model, self._bus)
                _users[found] = 1
                return found, True
            if found in _users:  # made by another Stats: detached when the last one stops
                _users[found] += 1
                return found, True
            return found, False  # the user's: it stays

    @property
    def active(self) -> bool:
        """Whether the hooks are in place (between ``start()`` and ``stop()``)."""
        attachment = self._attachment
        return attachment is not None and attachment.active

    def start(self) -> None:
        """Add the hooks; the statistics continue from where they are."""
        if self._attachment is not None:
            raise RuntimeError(f"{self!r} is already started; stop() it first")
        attachment, owned = self._attach()
        handles: List[Handle] = []
        # On the user's bus another model may have modules of the same names.
        shared = self._bus is not None
        try:
            for name in self._selected:
                feed = self._feeds[name]
                if name in self._values:  # a value's post hook sees it, and it alone
                    on_value = (
                        feed.on_output if self.of == "output" else partial(_hook_value_grad, feed)
                    )
                    handles.append(attachment.post(name, on_value))
                    continue
                module = attachment.module(name)
                feed.watch(module if shared else None)
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
                _release(attachment)
            raise
        self._attachment, self._owned, self._handles = attachment, owned, handles

    def stop(self) -> None:
        """Remove the hooks (idempotent); the statistics stay readable."""
        attachment, self._attachment = self._attachment, None
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.remove()
        for feed in self._feeds.values():
            feed.drop_grad_hooks()
        if attachment is not None and self._owned:
            _release(attachment)
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
            self._state.paused += 1
        return _Resume(self)

    def resume(self) -> None:
        """End one :meth:`pause`."""
        with self._lock:
            if self._state.paused == 0:
                raise RuntimeError(f"{self!r} is not paused")
            self._state.paused -= 1

    @property
    def paused(self) -> bool:
        """Whether calls are being ignored."""
        return self._state.paused > 0

    # --- the mapping -------------------------------------------------------------------

    @property
    def selected(self) -> List[str]:
        """Every selected module's name (or name of the vocabulary), in model order,
        whether it ran or not."""
        return list(self._selected)

    @property
    def skipped(self) -> Dict[str, str]:
        """Modules whose calls were skipped, and why (a non-float tensor, no tensor)."""
        with self._lock:
            return dict(self._skipped)

    def __getitem__(self, name: str) -> Moments:
        feed = self._feeds.get(name)
        stat = feed.flush() if feed is not None else None
        if stat is not None:
            return stat
        if feed is not None:
            why = self._skipped.get(name)
            raise KeyError(
                f"{self._kind(name)} {name!r} was selected but has no statistics"
                + (f": its calls were skipped ({why})" if why else ": it has not run")
            )
        close = difflib.get_close_matches(name, self._selected, n=5, cutoff=0.5)
        hint = f"; close names: {', '.join(map(repr, close))}" if close else ""
        raise KeyError(f"{self._kind(name)} {name!r} was not selected{hint}")

    def __iter__(self) -> Iterator[str]:
        return iter([name for name in self._selected if self._has(name)])

    def __len__(self) -> int:
        return sum(1 for name in self._selected if self._has(name))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._feeds and self._has(name)

    def _kind(self, name: str) -> str:
        """What messages call a key: a "module", or a "name" of the vocabulary."""
        return "name" if name in self._values else "module"

    def _kinds(self, conjunction: str = "and") -> str:
        """What messages call the keys: "modules", "names", or both."""
        if not self._values:
            return "modules"
        if len(self._values) == len(self._selected):
            return "names"
        return f"modules {conjunction} names"

    def _has(self, name: str) -> bool:
        feed = self._feeds[name]
        return feed.stat is not None or feed.filled > 0

    def _flush(self) -> None:
        for feed in self._feeds.values():
            feed.flush()

    # --- combining ---------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every statistic, note and feature size (the hooks stay)."""
        with self._lock:
            for feed in self._feeds.values():
                feed.forget_locked()
            self._skipped.clear()
            self._reduced = False

    def merge(self, other: Stats) -> None:
        """Add ``other``'s statistics to these, exactly (same ``of`` and ``dim``).

        Statistics reduced across ranks (:meth:`reduce`) merge into reduced or
        empty ones, which are then reduced too (``reduce()`` refuses them); a mix
        of reduced and local statistics is a ``ValueError``, as it would be
        neither this rank's data nor the group's.

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
            reduced = self._reduced or other._reduced
            if incoming and self._reduced != other._reduced and (self._reduced or len(self)):
                # A mix is neither this rank's data nor the group's, and reduce() would
                # count the reduced part once per rank.
                sides = ("these", "the other") if self._reduced else ("the other", "these")
                raise ValueError(
                    f"merge(): {sides[0]} statistics are reduced across ranks already and "
                    f"{sides[1]} are one rank's local statistics; merge local with local "
                    f"(then reduce() the total), or reduced into reduced or empty statistics"
                )
            for name, stat in incoming.items():
                self._set(name, stat, add=True)
            self._reduced = reduced

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
        loaded: Dict[str, Moments] = {}
        for name, fields in state["stats"].items():
            loaded[name] = Moments(
                int(fields["count"]),
                *(torch.as_tensor(fields[key], dtype=F64).clone() for key in _TENSORS),
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
        to rounding, with the limit of :meth:`Moments.merge` on ``|mean| / std``),
        whatever the batch sizes. Every rank of the group must call
        it, at the same point: it runs the same five collectives on every rank,
        over the selected names sorted, with empty statistics for modules that did
        not run there, so a module that ran on some ranks only cannot make it hang.
        The collectives: one ``MAX`` all_reduce of four numbers, the same size on
        every rank, that checks the ranks agree on the names and kind; one ``MAX``
        of the feature sizes (a rank where a module never ran does not know them);
        one ``SUM`` of the counts and sums (the global mean); one ``SUM`` of the M2
        terms centred on that mean (what keeps it exact; a single sum of squares
        would cancel); and one ``MAX`` of max, -min and NaN flags, overlapped with
        the first ``SUM`` (a NaN anywhere makes that feature's min and max NaN, as
        in one process). Their size grows with the features, never with the world
        size.

        Raises ``RuntimeError`` without an initialized process group, when this
        rank is not in ``group``, or on statistics reduced already (reducing
        twice would count them once per rank: ``reset()`` in between; statistics
        merged from reduced ones are reduced too, see :meth:`merge`); raises
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

    def _set(self, name: str, stat: Moments, *, add: bool) -> None:
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

    def _check_names(self, incoming: Mapping[str, Moments], what: str) -> None:
        unknown = [name for name in incoming if name not in self._feeds]
        if unknown:
            raise ValueError(
                f"{what}(): {self._kinds('or')} {', '.join(map(repr, unknown))} are not selected "
                f"here; "
                f"selected: {', '.join(map(repr, self._selected))}"
            )
        for name, stat in incoming.items():
            features = self._feeds[name].features
            if features is not None and stat.shape != features:
                raise ValueError(
                    f"{what}(): {self._kind(name)} {name!r} has feature shape {features} here and "
                    f"{stat.shape} in the other statistics"
                )

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            "a Stats cannot be copied or pickled (copy, deepcopy, torch.save): it hooks a "
            "live model in this process. Save or copy its numbers with state_dict() "
            "(torch.save(stats.state_dict(), path)), and load them into stats(model, ...) "
            "with load_state_dict()"
        )

    def __repr__(self) -> str:
        ran, selected = len(self), len(self._selected)
        text = f"<Stats of={self.of!r} dim={self.dim!r}, {ran} of {selected} {self._kinds()}"
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
