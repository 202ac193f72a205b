"""What must happen when a module call starts, before any global pre hook of hookbus's.

torch runs the process-wide forward pre hooks (``every_module``'s dispatcher) before
a module's own. A step counter (``steps()``) counts a model's forwards with a pre
hook of the model, so hooks on every module would read its index before that hook
ran, one step behind. A counter therefore also registers here, by the module it
counts; the every-module pre dispatcher calls :func:`start_call` first, with the
frame that runs the call's hooks (torch's ``inner`` closure in ``_call_impl``), and
the counter's own hook, called from that same frame, then knows the call is counted.

Nothing is registered unless a ``steps()`` block is open: :data:`STARTS` is then
empty, which the dispatcher tests before anything else.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Tuple

from torch import nn

__all__ = ["STARTS", "CallStart", "add_call_start", "remove_call_start", "start_call"]

CallStart = Callable[[Any], None]
"""``start(frame)``: a module call runs its hooks from ``frame``; called once or more."""

STARTS: weakref.WeakKeyDictionary[nn.Module, Tuple[CallStart, ...]] = weakref.WeakKeyDictionary()
"""The call starts of each module (empty: nothing to do)."""

_lock = threading.Lock()  # changes only; no user code runs under it


def add_call_start(module: nn.Module, start: CallStart) -> None:
    """Call ``start(frame)`` when ``module`` is called, before hookbus's global pre hooks."""
    with _lock:
        STARTS[module] = (*STARTS.get(module, ()), start)


def remove_call_start(module: nn.Module, start: CallStart) -> None:
    """Undo :func:`add_call_start`; one not added is ignored."""
    with _lock:
        kept = tuple(s for s in STARTS.get(module, ()) if s != start)  # a bound method: ==
        if kept:
            STARTS[module] = kept
        else:
            STARTS.pop(module, None)


def start_call(module: nn.Module, frame: Any) -> None:
    """Run the call starts of ``module``, whose call runs its hooks from ``frame``."""
    for start in STARTS.get(module, ()):
        start(frame)
