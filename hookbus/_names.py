"""Event and hook-point names: validation, enum members, literal spellings, and glob
patterns compiled once.

A name is a string. Where hooks are registered, glob characters make it a pattern;
everywhere else (emit, declarations, hook points) any string is a name, and
:func:`literal` spells such a name for registration. An ``enum.Enum`` member stands
for a string (:func:`name_of`), so the rest of hookbus only ever sees ``str``.
"""

from __future__ import annotations

import enum
import fnmatch
import re
from typing import Callable, Dict, Optional

__all__ = [
    "NAME_CACHE_LIMIT",
    "Matcher",
    "check_and_cache",
    "check_name",
    "is_pattern",
    "literal",
    "matcher_for",
    "name_of",
]

Matcher = Callable[[str], Optional["re.Match[str]"]]

_GLOB_CHARS = frozenset("*?[")


def is_pattern(name: str) -> bool:
    """Whether ``name`` is a glob pattern (it holds ``*``, ``?`` or ``[``).

    Example:
        >>> is_pattern("train.*"), is_pattern("train.step")
        (True, False)
    """
    return not _GLOB_CHARS.isdisjoint(name)


_GLOB_CHAR = re.compile(r"([*?\[])")


def literal(name: str) -> str:
    """The pattern that matches exactly ``name``, glob characters and all, for registering.

    Any string can be emitted (``bus.emit("data[0]")``); where hooks are registered,
    ``*``, ``?`` and ``[`` make a pattern, so a name that holds them is registered as
    ``literal(name)``: each glob character in brackets, the glob's own escape (as
    ``glob.escape`` writes it). A name without glob characters is returned unchanged.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> hookbus.literal("data[0]")
        'data[[]0]'
        >>> _ = bus.on(hookbus.literal("data[0]"), print)
        >>> bus.emit("data[0]", "heard")
        heard
        >>> bus.emit("data0", "not heard: 'data[0]' as a pattern would match this")
    """
    return _GLOB_CHAR.sub(r"[\1]", check_name(name, "literal() name", allow_pattern=False))


def name_of(name: object) -> object:
    """The string an ``enum.Enum`` member stands for as a name; anything else unchanged.

    A member whose value is a string (a ``StrEnum``, or ``PAID = "order.paid"``) is
    that string, so ``bus.emit(Topic.PAID)`` and ``bus.emit("order.paid")`` are one
    event; any other member is ``"Class.MEMBER"``, as plain enums print.

    Example:
        >>> import enum
        >>> class Topic(enum.Enum):
        ...     PAID = "order.paid"
        ...     SHIPPED = 2
        >>> name_of(Topic.PAID), name_of(Topic.SHIPPED), name_of("train")
        ('order.paid', 'Topic.SHIPPED', 'train')
    """
    if isinstance(name, enum.Enum):
        value = name.value
        if isinstance(value, str):
            return str.__str__(value)  # a plain str, even from a str subclass
        return f"{type(name).__name__}.{name.name}"
    return name


def check_name(name: object, what: str, *, allow_pattern: bool) -> str:
    """Return ``name`` as a plain ``str`` if it is usable, else raise saying what is accepted.

    ``what`` says what the name is for ("event name", "hook point name"...), so the
    message points at the argument the user got wrong. An ``enum.Enum`` member gives
    its string (:func:`name_of`). ``allow_pattern`` (where hooks are registered):
    glob characters make a pattern, which must be complete; else any string is a
    name, glob characters included.
    """
    text = name_of(name)  # an enum member's string; anything else as it is
    if not isinstance(text, str):
        raise TypeError(
            f"{what} must be a str or an enum member, got {type(name).__name__} {name!r}; "
            f"accepted: a non-empty string such as 'train.step'"
            + (" or a glob pattern such as 'train.*'" if allow_pattern else "")
        )
    if text.__class__ is not str:
        text = str.__str__(text)  # a plain str, so that names print and compare as such
    if not text or text.strip() != text:
        raise ValueError(
            f"{what} must be a non-empty string without leading or trailing spaces, got {text!r}"
        )
    if allow_pattern and is_pattern(text) and _has_unclosed_bracket(text):
        raise ValueError(
            f"glob pattern {text!r} has a '[' without its closing ']'; accepted: "
            f"'*', '?', and complete character sets such as 'layer.[0-3]'; for a name "
            f"that holds glob characters, register hookbus.literal({text!r})"
        )
    return text


def matcher_for(pattern: str) -> Matcher:
    """A fast, case-sensitive matcher for a glob pattern (``fnmatchcase`` rules).

    Example:
        >>> bool(matcher_for("train.*")("train.step")), bool(matcher_for("train.*")("eval"))
        (True, False)
    """
    return re.compile(fnmatch.translate(pattern)).match


def _has_unclosed_bracket(pattern: str) -> bool:
    # fnmatch quietly treats an unclosed '[' as a literal; that is almost always a typo.
    i = 0
    while i < len(pattern):
        if pattern[i] == "[":
            j = i + 1
            if j < len(pattern) and pattern[j] == "!":
                j += 1
            if j < len(pattern) and pattern[j] == "]":
                j += 1
            close = pattern.find("]", j)
            if close < 0:
                return True
            i = close
        i += 1
    return False


NAME_CACHE_LIMIT = 1_024
"""Names kept by :func:`check_and_cache`: a few hundred cover a program's hooks."""


def check_and_cache(
    names: Dict[str, Optional[Matcher]], name: str, what: str
) -> Optional[Matcher]:
    """Check a name not in ``names`` yet (``what`` it is, for the error); cache its matcher.

    Registration looks a name up in its plain dict first, so that each name is
    checked and its pattern compiled once. Only a speed-up: ever-new names never
    grow the cache past :data:`NAME_CACHE_LIMIT`.

    Example:
        >>> names = {}
        >>> check_and_cache(names, "train.*", "event name")("train.step") is not None
        True
        >>> check_and_cache(names, "eval", "event name"), sorted(names)
        (None, ['eval', 'train.*'])
    """
    check_name(name, what, allow_pattern=True)
    match = matcher_for(name) if is_pattern(name) else None
    if len(names) >= NAME_CACHE_LIMIT:
        names.clear()
    names[name] = match
    return match
