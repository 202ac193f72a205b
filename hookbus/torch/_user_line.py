"""Where ``hookbus.torch``'s warnings point: at the user's line.

A warning issued deep inside the adapter (hooks a compiled model never runs, a
capture that missed modules, a graph cut under DDP) points at the first frame
outside hookbus, however deep the call that issued it.
"""

from __future__ import annotations

import sys

__all__ = ["stacklevel_outside_hookbus"]


def stacklevel_outside_hookbus() -> int:
    """The ``stacklevel`` of the first caller outside hookbus, for a warning issued here.

    Call it from the function that calls ``warnings.warn``.

    Example:
        >>> stacklevel_outside_hookbus() >= 2
        True
    """
    frame = sys._getframe(2)  # the caller of the function that warns
    level = 2
    while frame is not None and frame.f_globals.get("__name__", "").startswith("hookbus"):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level
