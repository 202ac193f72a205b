"""Which module call a native hook runs in, told from the interpreter's frames.

torch calls a module's pre and post hooks from ``Module._call_impl`` without
saying which call they belong to; the frames do. A module point's pre
dispatcher keys the context it passes on by the frame that calls the hooks
(torch's ``inner`` closure in ``_call_impl``), and its post dispatcher, called
from that frame or from ``_call_impl`` itself when forward raised, finds it
again (:func:`call_keys`). :func:`running_calls` tells the keys of every
module call under way in this thread, so that an entry left by a call that
ended early can be dropped, :func:`module_call_frame` the key of the call that
a forward runs in, and :func:`forward_raised` whether the post hook runs on
forward's error path.

Frames also tell the forward's own work from its hooks': hookbus's native hooks
are marked (:func:`runs_hooks`), and :func:`where_called` says whether code runs
in a module call's forward, in one of those hooks inside it, or after the call
ended (operation points count the forward's torch calls only).
"""

from __future__ import annotations

import enum
import sys
from typing import Any, Callable, Optional, Set, Tuple, TypeVar

import torch

__all__ = [
    "CALL_FAILED",
    "Where",
    "call_keys",
    "forward_raised",
    "handled_error",
    "module_call_frame",
    "running_calls",
    "runs_hooks",
    "where_called",
]

_MODULE_CLASS: Any = torch.nn.Module
_CALL_IMPL = _MODULE_CLASS._call_impl.__code__

CALL_FAILED: Any = _CALL_IMPL
"""The code of the frame that calls a post hook when the call failed.

torch calls forward hooks from its ``inner`` closure when the call went well, and
the ``always_call`` ones it has not called yet from ``_call_impl``'s except clause
when forward, a pre hook or an earlier forward hook raised: a post dispatcher whose
caller's ``f_code`` is this one runs on the call's error (:data:`handled_error`).
Test :data:`handled_error` first: it is cheaper than materializing the caller's frame.
"""

handled_error: Callable[[], Optional[BaseException]] = getattr(
    sys, "exception", lambda: sys.exc_info()[1]
)
"""The error being handled (``sys.exception()``, Python 3.11+), else ``None``."""

_F = TypeVar("_F", bound=Callable[..., Any])
# The ids of the marked functions' code objects (kept alive by those functions): a
# code object's own hash is computed from its contents at every lookup. Filled by
# runs_hooks: at import, and once per generated native post hook (_point._native_post).
_HOOK_CODES: Set[int] = set()


class Where(enum.Enum):
    """Where :func:`where_called` found its caller, relative to a module call."""

    FORWARD = "forward"  # in the call's forward (its submodules' forwards included)
    HOOKS = "hooks"  # in a hookbus native hook run inside the call
    ENDED = "ended"  # the call is not running (it ended without its post hook)


def runs_hooks(function: _F) -> _F:
    """Mark ``function``, a native torch hook of hookbus's, as running hooks, not forward.

    Torch calls made under it (by the bus hooks it runs, or by itself) are not the
    forward's own: :func:`where_called` says ``Where.HOOKS`` for them.
    """
    _HOOK_CODES.add(id(function.__code__))
    return function


_FORWARD, _HOOKS, _ENDED = Where.FORWARD, Where.HOOKS, Where.ENDED  # an enum lookup costs


def where_called(frame: Any, call: Any) -> Where:
    """Where ``frame`` runs relative to the module call whose hooks run from ``call``
    (torch's frame, as the pre hooks saw it): walks up from ``frame`` to ``call``."""
    hooks = _HOOK_CODES
    while frame is not call:
        if frame is None:
            return _ENDED
        if id(frame.f_code) in hooks:
            while frame is not None and frame is not call:  # inside the call, or ended?
                frame = frame.f_back
            return _ENDED if frame is None else _HOOKS
        frame = frame.f_back
    return _FORWARD


def call_keys(caller: Any, error: Optional[BaseException]) -> Tuple[int, ...]:
    """The keys the pre dispatcher may have used for a call whose forward raised.

    Here torch calls the post dispatcher from ``_call_impl`` itself, whose frame
    is ``caller``; the pre dispatcher was called from the ``inner`` closure that
    raised, the next frame of the error's traceback.
    """
    tb = error.__traceback__ if error is not None else None
    if tb is not None and tb.tb_next is not None:
        return (id(tb.tb_next.tb_frame), id(caller))
    return (id(caller),)


def running_calls() -> Set[int]:
    """The keys of every module call running in this thread (see ``_stack``)."""
    running: Set[int] = set()
    frame: Any = sys._getframe(1)
    while frame is not None:
        back = frame.f_back
        if frame.f_code is _CALL_IMPL or (back is not None and back.f_code is _CALL_IMPL):
            running.add(id(frame))
        frame = back
    return running


def module_call_frame(caller: Any) -> Any:
    """The frame of torch's that runs the module call whose forward ``caller`` called.

    That frame (torch's ``inner`` closure, or ``_call_impl``) calls forward itself,
    unless something sits in between: ``torch.jit.trace``'s ``_slow_forward``, or a
    wrapper set on the instance over hookbus's forward swap (accelerate's
    ``prepare(mixed_precision=...)`` sets one). It is the nearest such frame up the
    stack, else ``caller`` itself (a forward called outside any module call).
    """
    frame = caller
    while frame is not None:
        back = frame.f_back
        if frame.f_code is _CALL_IMPL or (back is not None and back.f_code is _CALL_IMPL):
            return frame
        frame = back
    return caller


def forward_raised(caller: Any) -> bool:
    """Whether ``caller`` (Module._call_impl) is handling an error raised by forward."""
    error = sys.exc_info()[1]
    if error is None:
        return False
    tb = error.__traceback__
    return tb is not None and tb.tb_frame is caller
