"""Skipping a module's forward, and activation patching: a forward that returns a given value.

Two users of one mechanism: ``ctx.skip(value)`` in a module's pre hook, and
:class:`patch`, which makes the modules it is given output what a cache holds.

torch runs ``forward`` whatever its hooks do: ``Module._call_impl`` reads
``self.forward`` before the pre hooks run, then calls it. The one way to skip it
is the one people write by hand, an instance attribute ``module.forward`` that
shadows the class's method (``_call_impl`` reads ``self.forward``, so every hook
still runs around it). A :class:`ForwardSwap` is that attribute, owned: installed
while something needs it (a module point with pre hooks, so that ``ctx.skip``
works there, or a :func:`~hookbus.torch.patch`), counted, and removed when the
last user releases it, which every user does in a ``finally`` or at removal and
``detach()``. The module is then exactly as before (a forward of its own that
the user had set is put back).

How a skip reaches the forward: a pre hook calls ``ctx.skip(value)``; the
module point's pre dispatcher hands the value to :meth:`ForwardSwap.skip_call`
with the frame that runs the call (torch's ``inner`` closure, which calls the
pre hooks and then ``forward``); the swapped forward, called from that same
frame, returns the value instead of running. The frame is held, not its id, so
an entry left by a call that never reached forward (a later pre hook raised)
can never match another call; it goes at the next skip, or with the swap.

While nothing is pending or replaced, the swapped forward just calls the real
one: one more Python call per call of a module with pre hooks (about 0.3 us, on
top of the 2 us that a pre hook costs).

Copies carry no skip, as they carry no hook: ``copy.deepcopy`` and pickle
(``torch.save``) copy the swapped forward as a stand-in that removes itself
from the copy at its first call and runs the class's forward.

:class:`patch` without positions puts a replacement on each module's swap (the
hand-written ``module.forward = lambda *a, **k: stored``, owned and put back);
with positions, the forward runs and one native forward hook overwrites those
positions of its output. Like :func:`~hookbus.torch.capture`, a patch needs no
bus, and leaves the model's hook dicts and attributes as they were on exit.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import weakref
from typing import (
    Any,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
    cast,
)

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..adapter import Removable, is_pattern
from ._attach import ROOT, Selector, close_names, select
from ._capture import Cache, Record
from ._point import running_calls
from ._tree import Path
from ._unwrap import ModuleName, _current_cache, _wrapped_attribute, unwrap, walk
from ._vocabulary import NameHooks, is_names_selector, select_names

__all__ = [
    "ForwardSwap", "Positions", "Replacement", "is_swapped", "patch", "remove_copied_forward",
]  # fmt: skip

Replacement = Callable[[nn.Module, Tuple[Any, ...], Dict[str, Any]], Any]
"""``replacement(module, args, kwargs)``: what a swapped forward returns instead of running."""

Positions = Union[int, slice, Sequence[int], torch.Tensor]
"""What :class:`patch` takes as ``positions``: any index of one dimension."""

_swaps: weakref.WeakKeyDictionary[nn.Module, ForwardSwap] = weakref.WeakKeyDictionary()
_swaps_lock = threading.Lock()  # acquire/release only; no user code runs under it


class ForwardSwap:
    """The instance-level ``forward`` of one module, able to return a value without running.

    Get it with :meth:`acquire` and give it back with :meth:`release`; the
    attribute is set at the first acquire and removed at the last release.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> layer = nn.Linear(2, 2)
        >>> swap = ForwardSwap.acquire(layer)
        >>> swap.add_replacement(lambda module, args, kwargs: torch.zeros(1))
        >>> layer(torch.ones(2))
        tensor([0.])
        >>> swap.release()
        >>> "forward" in vars(layer)
        False
    """

    __slots__ = (
        "_bound", "_busy", "_local", "_lock", "_module", "_own_forward", "_replacements", "_users",
    )  # fmt: skip

    def __init__(self, module: nn.Module) -> None:
        self._module = weakref.ref(module)
        self._users = 0
        self._local = threading.local()  # .pending: this thread's (frame, value) skips
        self._lock = threading.Lock()  # changes to _busy, pending and _replacements
        # Skips pending (in every thread) plus replacements: while 0, the swapped
        # forward only calls the real one (the cost of a module with pre hooks).
        self._busy = [0]
        self._own_forward: Any = vars(module).get("forward")  # a user's own, put back at the end
        self._replacements: List[Replacement] = []  # the last one wins
        self._bound: Any = None

    @classmethod
    def acquire(cls, module: nn.Module) -> ForwardSwap:
        """The swap of ``module``, installed if it was not; every acquire needs a release."""
        with _swaps_lock:
            swap = _swaps.get(module)
            if swap is None:
                swap = cls(module)
                swap._install(module)
                _swaps[module] = swap
            swap._users += 1
            return swap

    def release(self) -> None:
        """Give the swap back; the last release puts the module's forward back."""
        with _swaps_lock:
            self._users -= 1
            if self._users > 0:
                return
            module = self._module()
            if module is None:
                return
            if _swaps.get(module) is self:
                del _swaps[module]
            attributes = vars(module)
            if attributes.get("forward") is self._bound:  # else the user replaced it since
                if self._own_forward is not None:
                    attributes["forward"] = self._own_forward
                else:
                    del attributes["forward"]
            self._bound = None
            self._local = threading.local()  # no held frame outlives the swap

    def renew(self) -> None:
        """Put a new swapped forward in place of the current one (same behaviour).

        ``torch.compile`` guards a module whose ``forward`` is an instance attribute
        by that attribute's identity, and drops the code it compiled for it once it
        is collected: a new one makes the code that calls this module compile again,
        so hooks that changed since are seen (see ``ModulePoint.recompile_on_change``).
        """
        with _swaps_lock:
            module = self._module()
            if module is None or self._users <= 0:
                return
            attributes = vars(module)
            if attributes.get("forward") is self._bound:  # else the user replaced it since
                self._bound = _SwappedForward(self, module)
                attributes["forward"] = self._bound

    def add_replacement(self, replacement: Replacement) -> None:
        """Make every call return ``replacement(module, args, kwargs)`` until it is removed."""
        with self._lock:
            self._replacements.append(replacement)
            self._busy[0] += 1

    def remove_replacement(self, replacement: Replacement) -> None:
        """Undo :meth:`add_replacement`; an earlier replacement, if any, applies again."""
        with self._lock:
            self._replacements.remove(replacement)
            self._busy[0] -= 1

    def skip_call(self, caller: Any, value: Any) -> None:
        """Make the forward called next from frame ``caller`` return ``value`` instead."""
        self._expect(caller, None, value)

    def run_replica(self, caller: Any, replica: nn.Module) -> None:
        """Make the forward called next from frame ``caller`` run as ``replica``'s.

        A ``DataParallel`` replica is a shallow copy of the module's ``__dict__``, so
        its ``forward`` is this swap, bound to the original module; the pre
        dispatcher, which torch gives the replica, says which module runs.
        """
        self._expect(caller, replica, None)

    def _expect(self, caller: Any, replica: Optional[nn.Module], value: Any) -> None:
        local = self._local
        with self._lock:
            try:
                pending: List[Tuple[Any, Optional[nn.Module], Any]] = local.pending
            except AttributeError:
                pending = local.pending = []
            if pending:  # rare: a call of this module inside a skipped one, or one left over
                running = running_calls()
                kept = [entry for entry in pending if id(entry[0]) in running]
                self._busy[0] -= len(pending) - len(kept)
                pending[:] = kept
            pending.append((caller, replica, value))
            self._busy[0] += 1

    def _install(self, module: nn.Module) -> None:
        self._bound = _SwappedForward(self, module)
        vars(module)["forward"] = self._bound

    def _call(self, caller: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        """A call while a skip is pending or a replacement is set (or of a user's forward)."""
        module = self._module()
        if module is None:
            raise RuntimeError("the module of this swapped forward was garbage collected")
        pending = self._local.__dict__.get("pending")
        found: Optional[Tuple[Any, Optional[nn.Module], Any]] = None
        if pending:
            with self._lock:
                for position in range(len(pending) - 1, -1, -1):
                    if pending[position][0] is caller:  # torch's frame that ran the pre hooks
                        self._busy[0] -= 1
                        found = pending.pop(position)
                        break
        if found is not None:
            _, replica, value = found
            if replica is None:
                return value
            return type(replica).forward(replica, *args, **kwargs)
        replacements = self._replacements
        if replacements:
            return replacements[-1](module, args, kwargs)
        own = self._own_forward
        if own is not None:
            return own(*args, **kwargs)
        return type(module).forward(module, *args, **kwargs)

    def __repr__(self) -> str:
        module = self._module()
        what = type(module).__name__ if module is not None else "a collected module"
        return f"<ForwardSwap of {what}, {self._users} users>"


class _SwappedForward:
    """What ``module.forward`` is while swapped: it holds the module weakly.

    A bound method would hold it strongly, from the module's own ``__dict__``: a
    reference cycle that keeps a dropped model (and its GPU memory) until the
    garbage collector runs.
    """

    # __weakref__: torch.compile's guard on a patched forward holds it weakly, and
    # drops the code compiled for it when it goes (ForwardSwap.renew).
    __slots__ = ("__weakref__", "_busy", "_module", "_run", "_swap")

    def __init__(self, swap: ForwardSwap, module: nn.Module) -> None:
        self._swap = swap
        self._module = swap._module
        self._busy = swap._busy
        # None: a forward the user set on the instance runs (through swap._call).
        self._run: Optional[Callable[..., Any]] = (
            type(module).forward if swap._own_forward is None else None
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        run = self._run
        if self._busy[0] or run is None:
            return self._swap._call(sys._getframe(1), args, kwargs)
        return run(self._module(), *args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        """The module's forward's (Hugging Face's ``generate`` reads it, for one)."""
        own = self._swap._own_forward
        if own is not None:
            return inspect.signature(own)
        module = self._module()
        if module is None:
            raise ValueError("the module of this swapped forward was garbage collected")
        return inspect.signature(functools.partial(type(module).forward, module))

    def __deepcopy__(self, memo: Dict[int, Any]) -> Any:
        # copy.deepcopy of the module memoizes the copy before copying its __dict__.
        copied = memo.get(id(self._module()))
        return _CopiedForward(copied) if isinstance(copied, nn.Module) else self

    def __reduce_ex__(self, protocol: Any) -> Tuple[Any, ...]:
        return (_CopiedForward, (self._module(),))

    def __repr__(self) -> str:
        return f"<swapped forward of {self._swap!r}>"


class _CopiedForward:
    """A copied module's stand-in for the swapped forward: it removes itself, then runs
    the class's forward. Copies carry no skip, as they carry no hook."""

    __slots__ = ("_module",)

    def __init__(self, module: Optional[nn.Module]) -> None:
        self._module = weakref.ref(module) if module is not None else None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module = self._module() if self._module is not None else None
        if module is None:
            raise RuntimeError("a copied module's forward stand-in lost its module")
        remove_copied_forward(module)
        return type(module).forward(module, *args, **kwargs)


def remove_copied_forward(module: nn.Module) -> None:
    """Remove a copied module's stand-in forward, if it has one (TorchScript, which
    compiles an instance's ``forward``, can't compile the stand-in)."""
    attributes = vars(module)
    if isinstance(attributes.get("forward"), _CopiedForward):
        del attributes["forward"]


def is_swapped(module: nn.Module) -> bool:
    """Whether ``module`` has a :class:`ForwardSwap` installed now."""
    return module in _swaps


class patch(Removable):  # remove(), and ``with`` removes on exit
    """Activation patching: the selected modules output what ``cache`` holds for them.

    ``cache`` is what :func:`capture` returned (or any mapping of module name to
    an output, or to a :class:`Record`); ``selector`` picks the modules to patch
    (a name, glob, module, type or list, as for :func:`attach`), by default every
    module the cache holds. Of a :class:`Record`, the output of call ``call`` is
    used (default ``-1``: the last).

    * ``positions=None``: the module's forward does not run; the call returns the
      stored output, as a hand-written ``module.forward = lambda *a, **k: stored``
      would (the module's hooks still run around it; its submodules don't run,
      its parameters get no gradient, and a key-value cache it would have
      updated is not updated).
    * ``positions=`` an index along ``dim`` (default ``1``, the sequence of a
      ``[batch, seq, ...]`` activation): the forward runs, and only those
      positions of its output are replaced by the stored ones (of a tuple or
      list output, each tensor whose stored counterpart has its shape; shapes
      that differ raise a ``ValueError`` naming the module and both shapes).

    Without positions a call returns the stored object itself, as a hand-written
    replacement would: capture with ``clone=True`` if later in-place ops would
    change it. Everything is put back on exit, even if the block raised;
    :meth:`remove` does the same without a ``with``. Patches nest: the innermost
    wins.

    Example:
        >>> import torch, hookbus.torch
        >>> from torch import nn
        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
        >>> clean, corrupt = torch.ones(1, 2), torch.zeros(1, 2)
        >>> with hookbus.torch.capture(model, "0") as cache:
        ...     clean_out = model(clean)
        >>> with hookbus.torch.patch(model, cache):
        ...     patched_out = model(corrupt)
        >>> torch.equal(patched_out, clean_out)
        True
        >>> "forward" in vars(model[0])  # put back
        False
    """

    def __init__(
        self,
        model: nn.Module,
        cache: Mapping[str, Any],
        selector: Optional[Selector] = None,
        *,
        positions: Optional[Positions] = None,
        dim: int = 1,
        call: int = -1,
    ) -> None:
        if not isinstance(model, nn.Module):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"patch() needs a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(cache, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f"patch() needs a cache: what capture() returned, or a mapping of module name "
                f"to output; got {type(cache).__name__}"
            )
        checked: Tuple[Tuple[str, object], ...] = (("dim", dim), ("call", call))
        for option, value in checked:
            if not isinstance(value, int) or isinstance(value, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise TypeError(
                    f"patch() option {option}= takes an int, got {type(value).__name__}"
                )
        self._swaps: List[ForwardSwap] = []
        self._replacements: List[Replacement] = []
        self._handles: List[RemovableHandle] = []
        self._name_hooks: Optional[NameHooks] = None
        root = unwrap(model)
        literal = list(cache) if selector is None else selector
        if is_names_selector(literal) and _by_literal_names(root, literal) is None:
            # values of the vocabulary (not modules named so): post hooks replace them
            kept = {
                name: _stored_output(cache, name, call) for name in select_names(root, literal)
            }
            self._name_hooks = NameHooks(
                root, list(kept), lambda name: _NamePatch(name, kept[name], positions, dim)
            )
            return
        chosen = _by_literal_names(root, literal)  # the common case, without a walk
        if chosen is None:
            chosen = _by_walking(root, cache, selector)
        names = list(chosen)
        stored = {name: _stored_output(cache, name, call) for name in names}
        try:
            for name in names:
                module = chosen[name]
                if positions is None:
                    swap = ForwardSwap.acquire(module)
                    self._swaps.append(swap)
                    replacement = _returning(stored[name])
                    swap.add_replacement(replacement)
                    self._replacements.append(replacement)
                else:
                    hook = _PositionPatch(name, stored[name], positions, dim)
                    self._handles.append(module.register_forward_hook(hook))
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Put every patched module back as it was; idempotent."""
        swaps, self._swaps = self._swaps, []
        replacements, self._replacements = self._replacements, []
        handles, self._handles = self._handles, []
        name_hooks, self._name_hooks = self._name_hooks, None
        if name_hooks is not None:
            name_hooks.remove()
        for position, swap in enumerate(swaps):
            try:
                if position < len(replacements):
                    swap.remove_replacement(replacements[position])
            finally:
                swap.release()
        for handle in handles:
            handle.remove()


def _by_literal_names(root: nn.Module, selector: Any) -> Optional[Dict[str, nn.Module]]:
    """The modules named literally by ``selector`` (a name or list of names), if all are
    reached by a path through no see-through wrapper (their bare name is then their
    ``named_modules()`` name); else ``None``, and :func:`_by_walking` decides.

    Walking a 60-module GPT-2 costs about 70 us, a third of a patch's cost
    otherwise; looking up one path a few.
    """
    if isinstance(selector, str):
        names: List[Any] = [selector]
    elif isinstance(selector, list) and selector:
        names = cast("List[Any]", selector)  # type: ignore[redundant-cast]  # for pyright
    else:
        return None
    found: Dict[str, nn.Module] = {}
    wrappers = _current_cache()  # wrapped_attribute() works this out at every call
    for name in names:
        if not isinstance(name, str) or is_pattern(name):
            return None
        module: Optional[nn.Module] = root
        if name != ROOT:
            for part in name.split("."):
                if module is None or _wrapped_attribute(module, wrappers) is not None:
                    return None
                module = module._modules.get(part)
        if module is None or _wrapped_attribute(module, wrappers) is not None:
            return None
        found[name] = module
    return found


def _by_walking(
    root: nn.Module, cache: Mapping[str, Any], selector: Optional[Selector]
) -> Dict[str, nn.Module]:
    """The selected modules by bare name, in model order, with selection's errors."""
    found = walk(root)
    modules: Dict[str, ModuleName] = {
        entry.bare or ROOT: entry for entry in found if not entry.is_wrapper
    }

    def name_of(module: nn.Module) -> str:
        for entry in found:
            if entry.module is module:
                return entry.bare or ROOT
        raise ValueError(f"{type(module).__name__} module is not part of the patched model")

    if selector is None:
        names = [name for name in modules if name in cache]
        if not names:
            raise ValueError(
                f"patch(): the cache holds no module of this model; cache: "
                f"{', '.join(map(repr, list(cache)[:8])) or 'empty'}"
                f"{close_names(modules, next(iter(cache), ''))}"
            )
    else:
        names = select(modules, selector, name_of)
    return {name: modules[name].module for name in names}


def _stored_output(cache: Mapping[str, Any], name: str, call: int) -> Any:
    """The output ``cache`` holds for module ``name``: a record's call ``call``, or the value."""
    try:
        value = cache[name]
    except KeyError as error:
        message = error.args[0] if error.args and isinstance(cache, Cache) else None
        raise KeyError(
            message or f"patch(): the cache holds no output for module {name!r}"
        ) from None
    if isinstance(value, Record):
        calls = value.calls
        if not -len(calls) <= call < len(calls):
            raise IndexError(
                f"patch(): call={call} is out of range for module {name!r}, which has "
                f"{len(calls)} recorded calls"
            )
        return calls[call].output
    return value


def _returning(value: Any) -> Replacement:
    def replacement(module: nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        return value

    return replacement


class _PositionPatch:
    """The forward hook of :func:`patch` with positions: the output with some positions stored."""

    __slots__ = ("dim", "name", "positions", "stored")

    def __init__(self, name: str, stored: Any, positions: Positions, dim: int) -> None:
        self.name = name
        self.stored = stored
        self.positions = positions
        self.dim = dim

    def __call__(self, module: nn.Module, args: Tuple[Any, ...], output: Any) -> Any:
        stored = self.stored
        if isinstance(output, torch.Tensor):
            return self._patched((), output, stored)
        items, kept = _as_sequence(output), _as_sequence(stored)
        if items is not None and kept is not None:
            new: List[Any] = []
            for i, item in enumerate(items):
                if isinstance(item, torch.Tensor) and i < len(kept):
                    item = self._patched((i,), item, kept[i])
                new.append(item)
            kind: Any = output.__class__
            return tuple(new) if kind is tuple else kind(new)
        raise TypeError(
            f"patch(positions=...) on module {self.name!r}: its output is "
            f"{type(output).__name__} and the stored one {type(stored).__name__}; positions "
            f"are patched in a tensor, or in the tensors of a tuple or list"
        )

    def _patched(self, path: Path, output: torch.Tensor, stored: Any) -> torch.Tensor:
        if not isinstance(stored, torch.Tensor) or stored.shape != output.shape:
            got = (
                tuple(stored.shape) if isinstance(stored, torch.Tensor) else type(stored).__name__
            )
            raise ValueError(
                f"patch(positions=...) on module {self.name!r}{_where(path)}: the output has "
                f"shape {tuple(output.shape)} and the stored one {got}; positions are patched "
                f"between outputs of one shape"
            )
        index = (slice(None),) * (self.dim % max(output.dim(), 1)) + (self.positions,)
        patched = output.clone()
        patched[index] = stored[index].to(device=output.device, dtype=output.dtype)
        return patched


class _NamePatch:
    """The post hook of :func:`patch` on a name of the vocabulary: the stored value, or
    the value with some positions stored."""

    __slots__ = ("positions", "stored")

    def __init__(self, name: str, stored: Any, positions: Optional[Positions], dim: int) -> None:
        self.stored = stored
        self.positions = (
            None if positions is None else _PositionPatch(name, stored, positions, dim)
        )

    def __call__(self, ctx: Any) -> None:
        if self.positions is None:
            ctx.result = self.stored
        else:
            ctx.result = self.positions._patched((), ctx.result, self.stored)


def _as_sequence(value: Any) -> Optional[Sequence[Any]]:
    """``value`` if it is a tuple or list (a module's output of several tensors), else None."""
    return cast("Sequence[Any]", value) if isinstance(value, (tuple, list)) else None


def _where(path: Path) -> str:
    return f" (output item {path[0]})" if path else ""
