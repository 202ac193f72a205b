"""Event and hook-point names: validation, and glob patterns compiled once."""

from __future__ import annotations

import fnmatch
import re
from typing import Callable, Dict, Optional

__all__ = [
    "NAME_CACHE_LIMIT",
    "Matcher",
    "check_and_cache",
    "check_name",
    "is_pattern",
    "matcher_for",
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


def check_name(name: object, what: str, *, allow_pattern: bool) -> str:
    """Return ``name`` if it is a usable name, else raise saying what is accepted.

    ``what`` says what the name is for ("event name", "hook point name"...), so the
    message points at the argument the user got wrong.
    """
    if not isinstance(name, str):
        raise TypeError(
            f"{what} must be a str, got {type(name).__name__} {name!r}; "
            f"accepted: a non-empty string such as 'train.step'"
            + (" or a glob pattern such as 'train.*'" if allow_pattern else "")
        )
    if not name or name.strip() != name:
        raise ValueError(
            f"{what} must be a non-empty string without leading or trailing spaces, got {name!r}"
        )
    if is_pattern(name):
        if not allow_pattern:
            raise ValueError(
                f"{what} {name!r} holds a glob character (* ? [); patterns only select "
                f"hooks when registering them: emit, collect and hook points take plain names"
            )
        if _has_unclosed_bracket(name):
            raise ValueError(
                f"glob pattern {name!r} has a '[' without its closing ']'; accepted: "
                f"'*', '?', and complete character sets such as 'layer.[0-3]'"
            )
    return name


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
