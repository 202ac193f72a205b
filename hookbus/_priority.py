"""Priorities: plain ints, higher runs first, with mmengine's names as aliases."""

from __future__ import annotations

import enum
from typing import Union

__all__ = ["Priority", "PriorityLike", "to_priority"]


class Priority(enum.IntEnum):
    """Named priorities. Higher runs first; the default is ``NORMAL`` (0).

    The names are mmengine's. mmengine runs *lower* numbers first (``HIGHEST = 0``,
    ``LOWEST = 100``); hookbus runs *higher* numbers first, so each name maps to
    ``50 - mmengine_value``. The spacing, and so the relative order of any mix of
    names and ints, is kept.

    Example:
        >>> from hookbus import Priority
        >>> int(Priority.HIGH), int(Priority.NORMAL), int(Priority.LOWEST)
        (20, 0, -50)
        >>> Priority.HIGHEST > Priority.VERY_HIGH > Priority.NORMAL
        True
    """

    HIGHEST = 50
    VERY_HIGH = 40
    HIGH = 20
    ABOVE_NORMAL = 10
    NORMAL = 0
    BELOW_NORMAL = -10
    LOW = -20
    VERY_LOW = -40
    LOWEST = -50


PriorityLike = Union[int, str, Priority]
"""What ``priority=`` accepts: an int, a :class:`Priority`, or one of its names."""

_NAMES = ", ".join(Priority.__members__)


def to_priority(value: object) -> int:
    """Turn a ``priority=`` argument into an int, or say what is accepted.

    Example:
        >>> to_priority("high"), to_priority(7), to_priority(Priority.LOW)
        (20, 7, -20)
    """
    # bool is an int subclass: True would silently mean priority 1.
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str):
        member = Priority.__members__.get(value.upper())
        if member is not None:
            return int(member)
        raise ValueError(
            f"unknown priority name {value!r}; accepted: an int (higher runs first) "
            f"or one of {_NAMES}"
        )
    raise TypeError(
        f"priority must be an int or a priority name, got {type(value).__name__} {value!r}; "
        f"accepted: an int (higher runs first) or one of {_NAMES}"
    )
