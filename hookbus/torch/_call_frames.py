"""Which module call a native hook runs in, told from the interpreter's frames.

torch calls a module's pre and post hooks from ``Module._call_impl`` without
saying which call they belong to; the frames do. A module point's pre
dispatcher keys the context it passes on by the frame that calls the hooks
(torch's ``inner`` closure in ``_call_impl``), and its post dispatcher, called
from that frame or from ``_call_impl`` itself when forward raised, finds it
again (:func:`call_keys`). :func:`running_calls` tells the keys of every
module call under way in this thread, so that an entry left by a call that
ended early can be dropped, and :func:`forward_raised` whether the post hook
runs on forward's error path.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Set, Tuple

import torch

__all__ = ["call_keys", "forward_raised", "running_calls"]

_MODULE_CLASS: Any = torch.nn.Module
_CALL_IMPL = _MODULE_CLASS._call_impl.__code__


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
