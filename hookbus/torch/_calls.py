"""Which module call a native dispatcher runs in, told from the interpreter's frames.

torch calls a module's pre and post dispatchers from ``Module._call_impl`` without
saying which call they belong to; the frames do. These helpers read them.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Set, Tuple

import torch

__all__ = ["INTERNAL_STOPS", "call_keys", "forward_raised", "running_calls"]

_MODULE_CLASS: Any = torch.nn.Module
_CALL_IMPL = _MODULE_CLASS._call_impl.__code__


def _internal_stops() -> Tuple[type, ...]:
    # Non-reentrant checkpointing stops a recomputation in backward by raising this
    # private error through the modules, then swallows it: no error of theirs.
    from torch.utils import checkpoint

    stop = getattr(checkpoint, "_StopRecomputationError", None)
    return (stop,) if isinstance(stop, type) else ()


INTERNAL_STOPS = _internal_stops()
"""Errors torch raises through modules and swallows itself: no error of theirs."""


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


def forward_raised(caller: Any) -> bool:
    """Whether ``caller`` (Module._call_impl) is handling an error raised by forward."""
    error = sys.exc_info()[1]
    if error is None:
        return False
    tb = error.__traceback__
    return tb is not None and tb.tb_frame is caller
