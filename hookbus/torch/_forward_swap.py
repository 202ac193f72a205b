"""A module's forward that can return a given value instead of running: :class:`ForwardSwap`.

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

Copies: ``copy.deepcopy`` binds the swapped forward (a bound method) to the
copy, and pickle stores it as ``getattr(copy, "forward")``. A copy's swapped
forward sees that it is not bound to its own module, removes itself from the
copy and runs the class's forward: copies carry no skip, as they carry no hook.
"""

from __future__ import annotations

import sys
import threading
import types
import weakref
from typing import Any, Callable, Dict, List, Tuple

from torch import nn

__all__ = ["ForwardSwap", "Replacement", "is_swapped"]

Replacement = Callable[[nn.Module, Tuple[Any, ...], Dict[str, Any]], Any]
"""``replacement(module, args, kwargs)``: what a swapped forward returns instead of running."""

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
        >>> swap.replacements.append(lambda module, args, kwargs: torch.zeros(1))
        >>> layer(torch.ones(2))
        tensor([0.])
        >>> swap.release()
        >>> "forward" in vars(layer)
        False
    """

    __slots__ = ("_bound", "_local", "_module", "_own_forward", "_users", "replacements")

    def __init__(self, module: nn.Module) -> None:
        self._module = weakref.ref(module)
        self._users = 0
        self._local = threading.local()
        self._own_forward: Any = vars(module).get("forward")  # a user's own, put back at the end
        #: What the forward returns instead of running, innermost (last) first.
        self.replacements: List[Replacement] = []
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
            self._local.__dict__.clear()  # no held frame outlives the swap

    def skip_call(self, caller: Any, value: Any) -> None:
        """Make the forward called next from frame ``caller`` return ``value`` instead."""
        try:
            pending: List[Tuple[Any, Any]] = self._local.pending
        except AttributeError:
            pending = self._local.pending = []
        if pending:  # rare: a call of this module inside a skipped one, or one left over
            from ._point import running_calls

            running = running_calls()
            pending[:] = [entry for entry in pending if id(entry[0]) in running]
        pending.append((caller, value))

    def _install(self, module: nn.Module) -> None:
        own = self._own_forward
        run: Callable[..., Any] = own if own is not None else type(module).forward
        bound_to_own = own is not None
        ref = self._module
        local = self._local
        replacements = self.replacements

        def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
            if self is not ref():
                return _forward_of_a_copy(self, forward, args, kwargs)
            pending = local.__dict__.get("pending")
            if pending:
                caller = sys._getframe(1)  # torch's frame that called the pre hooks
                for position in range(len(pending) - 1, -1, -1):
                    if pending[position][0] is caller:
                        return pending.pop(position)[1]
            if replacements:
                return replacements[-1](self, args, kwargs)
            if bound_to_own:
                return run(*args, **kwargs)
            return run(self, *args, **kwargs)

        forward.__name__ = "forward"  # pickle stores a bound method as getattr(obj, name)
        forward.__qualname__ = f"{type(module).__qualname__}.forward"
        forward.__wrapped__ = getattr(run, "__func__", run)  # type: ignore[attr-defined]  # signatures
        forward.__doc__ = getattr(run, "__doc__", None)
        self._bound = types.MethodType(forward, module)
        vars(module)["forward"] = self._bound

    def __repr__(self) -> str:
        module = self._module()
        what = type(module).__name__ if module is not None else "a collected module"
        return f"<ForwardSwap of {what}, {self._users} users>"


def _forward_of_a_copy(
    module: nn.Module, forward: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any]
) -> Any:
    """A copied module's swapped forward: remove it, then run the class's forward."""
    attributes = vars(module)
    current = attributes.get("forward")
    if getattr(current, "__func__", None) is forward:
        del attributes["forward"]
    return type(module).forward(module, *args, **kwargs)


def is_swapped(module: nn.Module) -> bool:
    """Whether ``module`` has a :class:`ForwardSwap` installed now."""
    return module in _swaps
