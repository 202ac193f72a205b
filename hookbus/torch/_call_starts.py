"""What must happen when a module call starts, before any global pre hook of hookbus's.

torch runs the process-wide forward pre hooks (``every_module``'s dispatcher) before
a module's own. A step counter (``steps()``) counts a model's forwards with a pre
hook of the model, so hooks on every module would read its index before that hook
ran, one step behind. A counter therefore also registers here, by the module it
counts; the every-module pre dispatcher calls :func:`start_call` first, with the
frame that runs the call's hooks (torch's ``inner`` closure in ``_call_impl``), and
the counter's own hook, called from that same frame, then knows the call is counted.

Nothing is registered unless a ``steps()`` block is open: :data:`ANY_STARTS` is then
false, which the dispatcher tests before anything else (a plain read, unlike the
length of a ``WeakKeyDictionary``).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Tuple

from torch import nn

__all__ = ["ANY_STARTS", "CallStart", "add_call_start", "remove_call_start", "start_call"]

CallStart = Callable[[Any], None]
"""``start(frame)``: a module call runs its hooks from ``frame``; called once or more."""

_starts: weakref.WeakKeyDictionary[nn.Module, Tuple[CallStart, ...]] = weakref.WeakKeyDictionary()

ANY_STARTS = [False]
"""``ANY_STARTS[0]``: whether a call start may be registered (a module that died with its
starts leaves it true: :func:`start_call` then finds none)."""

_lock = threading.Lock()  # changes only; no user code runs under it


def add_call_start(module: nn.Module, start: CallStart) -> None:
    """Call ``start(frame)`` when ``module`` is called, before hookbus's global pre hooks."""
    with _lock:
        _starts[module] = (*_starts.get(module, ()), start)
        ANY_STARTS[0] = True


def remove_call_start(module: nn.Module, start: CallStart) -> None:
    """Undo :func:`add_call_start`; one not added is ignored."""
    with _lock:
        kept = tuple(s for s in _starts.get(module, ()) if s != start)  # a bound method: ==
        if kept:
            _starts[module] = kept
        else:
            _starts.pop(module, None)
        ANY_STARTS[0] = bool(_starts)


def start_call(module: nn.Module, frame: Any) -> None:
    """Run the call starts of ``module``, whose call runs its hooks from ``frame``."""
    for start in _starts.get(module, ()):
        start(frame)
