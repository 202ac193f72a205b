"""The forward swap: a module's ``forward`` that can return a given value without running.

torch runs ``forward`` whatever its hooks do: ``Module._call_impl`` reads
``self.forward`` before the pre hooks run, then calls it. The one way to skip it
is the one people write by hand, an instance attribute ``module.forward`` that
shadows the class's method (``_call_impl`` reads ``self.forward``, so every hook
still runs around it). A :class:`ForwardSwap` is that attribute, owned: installed
while something needs it (a module point with pre hooks, so that ``ctx.skip``
works there, a :func:`~hookbus.torch.patch`, or a compiled model whose hooks
changed), counted, and removed when the last user releases it, which every user
does in a ``finally`` or at removal and ``detach()``. The module is then exactly
as before (a forward of its own that the user had set is put back).

How a skip reaches the forward: a pre hook calls ``ctx.skip(value)``; the
module point's pre dispatcher hands the value to :meth:`ForwardSwap.skip_call`
with the frame that runs the call (torch's ``inner`` closure, which calls the
pre hooks and then ``forward``); the swapped forward, called from that same
frame (or through a wrapper set over it on the instance, as accelerate's
mixed precision sets one), returns the value instead of running. The frame is held, not its id, so
an entry left by a call that never reached forward (a later pre hook raised)
can never match another call; it goes at the next skip, or with the swap.

While nothing is pending or replaced, the swapped forward just calls the real
one: one more Python call per call of a module with pre hooks (about 0.3 us, on
top of the 2 us that a pre hook costs).

torch runs no hook when a ``BaseException`` that is no ``Exception``
(``KeyboardInterrupt``, ``SystemExit``) leaves a forward; the swap is the one
place that sees it go by, and tells its watchers (:meth:`ForwardSwap.watch`):
a module point resumes the around hooks that the call started.

A *bracket* (:meth:`ForwardSwap.add_bracket`) runs around the forward itself,
``bracket(run, module, *args, **kwargs)`` calling ``run(module, *args, **kwargs)``:
the swapped forward calls the brackets, composed once per change, instead of the
class's forward. It sees the forward start and end however it ends (a ``finally``),
and costs the module no native hook: torch's call of a module without hooks takes
its short path. It sees only a forward that runs (the class's, or one the user set
on the instance): a skipped or replaced call runs none, so an operation site learns
from its brackets which operations a forward calls.

Copies carry no skip, as they carry no hook: ``copy.deepcopy`` and pickle
(``torch.save``) copy the swapped forward as a stand-in that removes itself
from the copy at its first call and runs the class's forward.

A new swap in place of the current one (:meth:`ForwardSwap.renew`) makes
``torch.compile`` compile again the code that calls the module:
:func:`renewed_swaps` gives a compiled model's modules one each.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

from torch import nn

from ._call_frames import module_call_frame, running_calls

__all__ = [
    "Bracket",
    "ForwardSwap",
    "Replacement",
    "Watcher",
    "is_swapped",
    "release_swaps",
    "remove_copied_forward",
    "renewed_swaps",
]

Replacement = Callable[[nn.Module, Tuple[Any, ...], Dict[str, Any]], Any]
"""``replacement(module, args, kwargs)``: what a swapped forward returns instead of running."""
Bracket = Callable[..., Any]
"""``bracket(run, module, *args, **kwargs)``: runs around the forward, which it calls as
``run(module, *args, **kwargs)`` (see :meth:`ForwardSwap.add_bracket`)."""

Watcher = Callable[[Any, BaseException], None]
"""``watcher(caller, error)``: told of a ``BaseException`` leaving the forward (see ``watch``)."""

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
        "_bound", "_brackets", "_busy", "_local", "_lock", "_module", "_own_forward",
        "_replacements", "_users", "_watchers",
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
        # The swapped forward in place, held weakly: the module's __dict__ holds it, and
        # through its brackets (an operation site's bound method) the bus, so a strong
        # reference from this swap, a value of the weak-keyed _swaps, would keep the
        # module alive for the process.
        self._bound: Callable[[], Any] = _nothing
        # Replaced whole on change: read unlocked. Held weakly where a watcher is a bound
        # method (a point or site of a bus): the swap lives as long as its module (a weak
        # key of _swaps), so a strong reference would keep the bus, and through what its
        # hooks hold, the module itself, alive for the process.
        self._watchers: Tuple[Callable[[], Optional[Watcher]], ...] = ()
        # The brackets, held as the watchers are (the composed forward in the module's
        # __dict__ holds them strongly, as a native hook would be held); changed under
        # _swaps_lock, which also guards _bound.
        self._brackets: Tuple[Callable[[], Optional[Bracket]], ...] = ()

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
            bound = self._bound()
            if bound is not None and attributes.get("forward") is bound:  # else replaced since
                if self._own_forward is not None:
                    attributes["forward"] = self._own_forward
                else:
                    del attributes["forward"]
            self._bound = _nothing
            self._local = threading.local()  # no held frame outlives the swap

    def in_place(self) -> bool:
        """Whether the module's ``forward`` is this swap's (none was set over it since)."""
        module = self._module()
        bound = self._bound()
        return module is not None and bound is not None and vars(module).get("forward") is bound

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
            bound = self._bound()
            if bound is not None and attributes.get("forward") is bound:  # else replaced since
                bound = _SwappedForward(self, module)
                self._bound = weakref.ref(bound)
                attributes["forward"] = bound

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

    def watch(self, watcher: Watcher) -> None:
        """Call ``watcher(caller, error)`` whenever a ``BaseException`` that is no
        ``Exception`` leaves the forward (torch runs no hook then); ``caller`` is the
        frame that called forward. It may raise: that error goes on instead."""
        held: Callable[[], Optional[Watcher]] = (
            weakref.WeakMethod(watcher) if inspect.ismethod(watcher) else _Strong(watcher)
        )
        with self._lock:
            self._watchers = (*self._watchers, held)

    def unwatch(self, watcher: Watcher) -> None:
        """Undo :meth:`watch` (a watcher not watching is ignored)."""
        with self._lock:
            self._watchers = tuple(
                each for each in self._watchers if each() not in (None, watcher)
            )

    def add_bracket(self, bracket: Bracket) -> None:
        """Run every call of the forward through ``bracket(run, module, *args, **kwargs)``,
        which calls ``run(module, *args, **kwargs)``; the first added runs innermost. A
        call skipped or replaced runs no forward, and so no bracket.

        Example:
            >>> import torch
            >>> from torch import nn
            >>> layer = nn.Identity()
            >>> def doubled(run, module, *args, **kwargs):
            ...     return run(module, *args, **kwargs) * 2
            >>> swap = ForwardSwap.acquire(layer)
            >>> swap.add_bracket(doubled)
            >>> layer(torch.ones(1))
            tensor([2.])
            >>> swap.remove_bracket(doubled)
            >>> swap.release()
        """
        held: Callable[[], Optional[Bracket]] = (
            weakref.WeakMethod(bracket) if inspect.ismethod(bracket) else _Strong(bracket)
        )
        with _swaps_lock:
            self._brackets = (*self._brackets, held)
            self._rebracket()

    def remove_bracket(self, bracket: Bracket) -> None:
        """Undo :meth:`add_bracket` (a bracket not added is ignored)."""
        with _swaps_lock:
            self._brackets = tuple(
                each for each in self._brackets if each() not in (None, bracket)
            )
            self._rebracket()

    def _bracketed(self, run: Callable[..., Any]) -> Callable[..., Any]:
        """``run(module, *args, **kwargs)`` called through the brackets."""
        for held in self._brackets:
            bracket = held()
            if bracket is not None:
                run = functools.partial(bracket, run)
        return run

    def _rebracket(self) -> None:
        """Give the swapped forward in place the brackets' composed run (_swaps_lock held)."""
        bound = self._bound()
        module = self._module()
        if bound is not None and module is not None and self._own_forward is None:
            bound._run = self._bracketed(type(module).forward)

    def _interrupted(self, caller: Any, error: BaseException) -> None:
        try:
            for held in self._watchers:
                watcher = held()
                if watcher is not None:
                    watcher(caller, error)
        finally:
            del error  # a watcher raises it through this frame: no cycle through it

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
        bound = _SwappedForward(self, module)
        self._bound = weakref.ref(bound)
        vars(module)["forward"] = bound

    def _call(self, caller: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        """A call while a skip is pending or a replacement is set (or of a user's forward)."""
        module = self._module()
        if module is None:
            raise RuntimeError("the module of this swapped forward was garbage collected")
        pending = self._local.__dict__.get("pending")
        found: Optional[Tuple[Any, Optional[nn.Module], Any]] = None
        if pending:
            caller = module_call_frame(caller)
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
            return self._bracketed(type(replica).forward)(replica, *args, **kwargs)
        replacements = self._replacements
        if replacements:  # no forward runs: the brackets see none
            return replacements[-1](module, args, kwargs)
        own = self._own_forward
        run: Callable[..., Any] = (
            type(module).forward if own is None else functools.partial(_own, own)
        )
        return (
            self._bracketed(run)(module, *args, **kwargs)
            if self._brackets
            else run(module, *args, **kwargs)
        )

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
            swap._bracketed(type(module).forward) if swap._own_forward is None else None
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        run = self._run
        try:
            if self._busy[0] or run is None:
                return self._swap._call(sys._getframe(1), args, kwargs)
            return run(self._module(), *args, **kwargs)
        except Exception:
            raise  # torch's always_call hooks see it
        except BaseException as error:  # torch runs no hook for it: the watchers must know
            self._swap._interrupted(sys._getframe(1), error)
            raise

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


def renewed_swaps(modules: List[nn.Module]) -> List[ForwardSwap]:
    """A forward swap on each module, each a new one: what a compiled model needs.

    torch.compile then compiles again the code that calls these modules, so that
    their new hooks run (see ``ModulePoint._renew_compile_swap``). Give them back
    with :func:`release_swaps`.
    """
    swaps: List[ForwardSwap] = []
    try:
        for module in modules:
            swap = ForwardSwap.acquire(module)
            swaps.append(swap)
            swap.renew()
    except BaseException:
        release_swaps(swaps)
        raise
    return swaps


def release_swaps(swaps: List[ForwardSwap]) -> None:
    """Give back :func:`renewed_swaps`' swaps; one still in use elsewhere is renewed."""
    for swap in swaps:
        swap.renew()  # code compiled while the capture's hooks were there goes with it
        swap.release()


def _own(forward: Callable[..., Any], module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """A forward the user set on the instance, called as the class's (inside the brackets)."""
    return forward(*args, **kwargs)


def _nothing() -> None:
    """A dead weak reference's answer: no swapped forward is in place."""
    return None


class _Strong:
    """A watcher held strongly (a plain function), read like a weak reference."""

    __slots__ = ("watcher",)

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def __call__(self) -> Watcher:
        return self.watcher
