"""Calls of a ``torch.nn.functional`` function inside a module's forward, without a mode.

An operation site normally sees the calls of its module's forward through a
``TorchFunctionMode``, which every torch call of that forward then passes through
(about 3 us each: at batch 1 on a small model, a quarter of an attention's time
for a hook on its one ``softmax``). The hand-written way costs nothing of the kind:
``F.softmax`` replaced by a wrapper while the attention runs. A *function swap*
does that for a site that asks for it (the names vocabulary's attention pattern):
while some site holds it (:func:`acquire`), ``torch.nn.functional.<name>`` is a
dispatcher that hands each call to the swapped operation modes on this thread's
list (:data:`THREAD`, innermost first, each seeing what the one inside it passes
on), and passes every other call (another thread's, one outside those forwards,
one made by a hook) straight to the original. It sees only calls made through the
module attribute (``nn.functional.softmax(...)``, as every Hugging Face
attention calls it), not ``torch.softmax`` or ``x.softmax()``.

``release`` puts the original back once no site holds it, unless something else
replaced the attribute since (then it is left as that code set it). A :class:`Hold`
is what a site keeps: its swaps let go of by ``remove()``, or when it is collected
(a model and bus dropped with a pattern hook still on must not leave the functions
swapped for the process). A hold collected while this module's lock is taken (the
garbage collector runs a finalizer wherever an allocation triggers it, the thread
holding the lock included) is released by whoever lets go of the lock next. Code that
swaps the function by hand may also put back what it saved before the swap was
in place, dropping the dispatcher: :func:`in_place` tells, so that a site falls
back to a mode for that call.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from typing import Any, Callable, Dict, Iterable, List, Tuple

import torch.nn.functional as F

from ..adapter import Removable

__all__ = ["THREAD", "Hold", "ThreadState", "acquire", "in_place", "release", "swappable"]


class ThreadState(threading.local):
    """This thread's operation modes, innermost last: one list for those pushed on
    torch's function stack and those seen through the swaps (``mode.swap``), which the
    operation sites keep (one append and one removal per forward of a selected module).

    A mode is what the dispatchers hand a call to: ``mode.swap``, ``mode.selected``
    (the names it takes), ``mode.site.run(mode, func, args, kwargs, caller)`` (the
    call, ``caller`` the frame that made it) and ``mode.__torch_function__``.
    """

    def __init__(self) -> None:
        self.modes: List[Any] = []
        self.depth = 0  # > 0 inside a dispatch: calls from hooks and from modes pass through
        # > 0 while an operation site runs hooks: torch calls they make are not the forward's.
        self.in_hooks = 0


THREAD = ThreadState()
"""The one :class:`ThreadState` (a ``threading.local``)."""
_lock = threading.Lock()  # not reentrant: a finalizer never waits for it (see _release_later)
# name -> (the original function, its dispatcher, how many holders)
_swaps: Dict[str, Tuple[Callable[..., Any], Callable[..., Any], int]] = {}
# Holds of collected Hold objects not yet let go of: appended without the lock, taken
# off under it (list.append and list.pop are atomic).
_pending: List[str] = []


def swappable(name: str) -> bool:
    """Whether ``torch.nn.functional`` has a function ``name`` a swap can take over.

    Example:
        >>> swappable("softmax"), swappable("matmul")
        (True, False)
    """
    return callable(getattr(F, name, None)) and not name.startswith("_")


class _Through:
    """The call of ``inner`` as ``mode`` sees it: what a mode's ``__torch_function__``
    gets as ``func`` (named as the function, for its operation point)."""

    __slots__ = ("__name__", "inner", "mode")

    def __init__(self, mode: Any, inner: Callable[..., Any], name: str) -> None:
        self.mode, self.inner, self.__name__ = mode, inner, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.mode.__torch_function__(self.inner, (), args, kwargs)


def _dispatcher(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def dispatch(*args: Any, **kwargs: Any) -> Any:
        state = THREAD
        modes = state.modes
        if not modes or state.depth:
            return original(*args, **kwargs)
        if len(modes) == 1:  # the common case: one hooked attention runs, straight to its site
            mode = modes[0]
            if not mode.swap or state.in_hooks or name not in mode.selected:
                return original(*args, **kwargs)
            state.depth += 1
            try:
                return mode.site.run(mode, original, args, kwargs, sys._getframe(1))
            finally:
                state.depth -= 1
        swapped = [mode for mode in modes if mode.swap]  # the others see it as torch calls it
        if not swapped:
            return original(*args, **kwargs)
        state.depth += 1
        try:
            call: Callable[..., Any] = original
            for mode in swapped:  # the innermost handles the call first, as with torch's modes
                call = _Through(mode, call, name)
            return call(*args, **kwargs)
        finally:
            state.depth -= 1

    return dispatch


def acquire(name: str) -> None:
    """Hold the swap of ``torch.nn.functional.<name>``: the dispatcher is in place.

    Example:
        >>> import torch.nn.functional as F
        >>> original = F.softmax
        >>> acquire("softmax")
        >>> F.softmax is original, F.softmax.__wrapped__ is original
        (False, True)
        >>> release("softmax")
        >>> F.softmax is original
        True
    """
    if not swappable(name):
        raise ValueError(f"torch.nn.functional has no function {name!r} to swap")
    with _lock:
        held = _swaps.get(name)
        if held is None:
            original: Callable[..., Any] = getattr(F, name)
            dispatcher = _dispatcher(name, original)
            setattr(F, name, dispatcher)
            _swaps[name] = (original, dispatcher, 1)
        else:
            _swaps[name] = (held[0], held[1], held[2] + 1)
    _release_pending()


def release(name: str) -> None:
    """Let go of one hold of ``name``'s swap; the last puts the original back."""
    with _lock:
        _release_locked(name)
    _release_pending()


def _release_locked(name: str) -> None:
    held = _swaps.get(name)
    if held is None:
        return
    original, dispatcher, count = held
    if count > 1:
        _swaps[name] = (original, dispatcher, count - 1)
        return
    del _swaps[name]
    if getattr(F, name, None) is dispatcher:
        setattr(F, name, original)


def _release_pending() -> None:
    """Let go of the holds of collected :class:`Hold` objects, unless the lock is taken:
    its holder (this thread, if a finalizer ran inside a locked section) does it after."""
    while _pending:
        if not _lock.acquire(blocking=False):
            return  # whoever holds it calls this function after letting go
        try:
            while _pending:
                _release_locked(_pending.pop())
        finally:
            _lock.release()


def _release_later(names: List[str]) -> None:
    """A collected :class:`Hold`'s finalizer: never waits for the lock, which this very
    thread may hold (a collection triggered inside :func:`acquire`)."""
    _pending.extend(names)
    names.clear()
    _release_pending()


class Hold(Removable):
    """Holds of the swaps of ``names`` (:func:`acquire`), let go of by :meth:`remove`
    or when the hold is collected.

    Example:
        >>> import gc
        >>> import torch.nn.functional as F
        >>> original = F.softmax
        >>> hold = Hold(["softmax"])
        >>> F.softmax is original
        False
        >>> del hold
        >>> _ = gc.collect()
        >>> F.softmax is original
        True
    """

    __slots__ = ("__weakref__", "_finalizer", "_names")

    def __init__(self, names: Iterable[str]) -> None:
        held: List[str] = []
        try:
            for name in names:
                acquire(name)
                held.append(name)
        except BaseException:
            for name in held:
                release(name)
            raise
        self._names = held
        # Not atexit: at exit nothing needs the originals back.
        self._finalizer = weakref.finalize(self, _release_later, held)
        self._finalizer.atexit = False

    @property
    def names(self) -> List[str]:
        """The functions still held."""
        return list(self._names)

    def remove(self) -> None:
        """Let go of the holds (once: later calls do nothing)."""
        self._finalizer.detach()
        names = list(self._names)
        self._names.clear()
        for name in names:
            release(name)


def in_place(names: Iterable[str]) -> bool:
    """Whether every function of ``names`` is swapped for its dispatcher now.

    Example:
        >>> import torch.nn.functional as F
        >>> acquire("softmax")
        >>> original = F.softmax.__wrapped__
        >>> in_place(["softmax"]), in_place(["softmax", "relu"])
        (True, False)
        >>> F.softmax = original  # code that saved F.softmax before, putting it back
        >>> in_place(["softmax"])
        False
        >>> release("softmax")
    """
    swaps = _swaps
    for name in names:
        held = swaps.get(name)
        if held is None or getattr(F, name, None) is not held[1]:
            return False
    return True
