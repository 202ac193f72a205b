"""Around hooks as a dispatch runs them: generators that one call starts and resumes.

An around hook is a generator function. A dispatch runs it up to its ``yield``
(``start_arounds``) and, once the call is done, resumes it there with the
outcome (``resume_arounds``; both in ``_async_dispatch.py``). The dispatch that
starts an around hook keeps its :data:`Started` entry and resumes it itself,
whatever is removed meanwhile: a removal (``remove()``, a scope's exit, a
``once`` hook's claim) stops a hook from *starting* again, never ends one that
started. The core's dispatches keep the entries in a local list; the torch
adapter, whose pre and post dispatchers are two callbacks, in the entry that
joins them (``torch/_point.py``).

This module holds what those loops share about around hooks: the entry, the
errors for a hook of the wrong shape, and the refusal of a value returned after
the ``yield`` (every hook kind refuses a returned value).
"""

from __future__ import annotations

import dis
import weakref
from types import CodeType
from typing import TYPE_CHECKING, Any, Generator, Optional, Tuple, cast

from ._errors import add_note

if TYPE_CHECKING:
    from ._context import CallContext
    from ._handle import Handle
    from ._trace import Tracer

__all__ = [
    "FINISHED",
    "Started",
    "did_not_yield",
    "may_return_a_value",
    "refusing_a_returned_value",
    "yielded_twice",
]

Started = Tuple["Handle", Any, Optional["Tracer"], int]
"""One around hook a call started: its handle, its generator, the tracer open when it
started (``None``: none was) and how long its set-up ran, in nanoseconds. Its teardown
is recorded into that tracer, as a dispatch records into the traces open when it began.
A plain tuple in a plain list, kept by whatever started it: an object per call would
cost 5% of an around hook's call."""

# ``next(generator, FINISHED)`` tells a finished around hook without a StopIteration:
# raising and catching one, with its traceback, cost a third of an around hook's call.
FINISHED: Any = object()


def did_not_yield(handle: Handle, ctx: CallContext) -> RuntimeError:
    return RuntimeError(
        f"around hook {handle!r} on {ctx.name!r} returned without yielding; an around "
        f"hook yields exactly once, where the call runs"
    )


def yielded_twice(
    handle: Handle,
    ctx: CallContext,
    error: Optional[BaseException],
    closing: Optional[BaseException],
) -> BaseException:
    """The error left once an around hook that yielded a second time was closed.

    ``error``: what the hook was resumed with (``None`` after a success);
    ``closing``: what closing it raised, if anything (it ignored ``GeneratorExit``,
    or a ``finally`` block raised). A ``BaseException`` that is no ``Exception``
    (Ctrl-C) goes on unchanged, the hook's fault in a note; otherwise a
    ``RuntimeError`` names the hook, caused by ``error``.
    """
    message = (
        f"around hook {handle!r} on {ctx.name!r} yielded a second time; an around hook "
        f"yields exactly once, where the call runs (it was closed)"
    )
    for interrupt in (closing, error):
        if interrupt is not None and not isinstance(interrupt, Exception):
            add_note(interrupt, f"hookbus: {message}")
            return interrupt
    twice = RuntimeError(message)
    twice.__cause__ = error  # the call's own error, if any
    twice.__context__ = closing  # what closing it raised, if anything
    return twice


def refusing_a_returned_value(
    around: Generator[Any, Any, Any], handle: Handle, ctx: CallContext
) -> Generator[Any, Any, None]:
    """``around`` as it is, except that a value it returns is refused with ``TypeError``.

    pluggy's wrappers return the result (and swallow an error by returning): a
    hook written so would otherwise have its value dropped silently. Only hooks
    whose code may return a value run through this (:func:`may_return_a_value`).
    """
    returned = yield from around
    if returned is not None:
        raise TypeError(
            f"around hook {handle!r} on {ctx.name!r} returned "
            f"{type(returned).__name__} after its yield, not None; an around hook changes "
            f"the result by assigning ctx.result = ..., and swallows an error with "
            f"ctx.recover(value) (a pluggy wrapper returns them instead)"
        )


_RETURN_VALUE = dis.opmap["RETURN_VALUE"]
_RETURN_CONST = dis.opmap.get("RETURN_CONST", -1)  # Python 3.12+
_LOAD_CONST = dis.opmap["LOAD_CONST"]
_CACHE = dis.opmap.get("CACHE", -1)  # Python 3.11+: inline caches between instructions
_read: weakref.WeakKeyDictionary[CodeType, bool] = weakref.WeakKeyDictionary()


def may_return_a_value(function: Any) -> bool:
    """Whether the generator function ``function`` may return a value that is not None.

    Read once per function's code, at registration, from its bytecode: a return of
    the constant None (a bare ``return``, or the end of the body) cannot, unless
    another path jumps to it with a value (``return x or None``); any other return
    may. Only these hooks pay for the check (:func:`refusing_a_returned_value`): the
    generator's own ``StopIteration`` at each call would cost a fifth of an around
    hook's call, for every hook. Without code to read, it may.
    """
    code = getattr(function, "__code__", None)
    if not isinstance(code, CodeType):
        return True
    known = _read.get(code)
    if known is None:
        known = _read[code] = _returns_a_value(code)
    return known


def _returns_a_value(code: CodeType) -> bool:
    raw = code.co_code
    nones = {index for index, constant in enumerate(code.co_consts) if constant is None}
    targets: Optional[Tuple[int, ...]] = None
    before, before_arg, extended = -1, -1, 0
    for offset in range(0, len(raw), 2):
        op = raw[offset]
        if op == _CACHE:
            continue
        arg = raw[offset + 1] | extended
        if op == dis.EXTENDED_ARG:
            extended = arg << 8
            continue
        extended = 0
        if op == _RETURN_CONST and arg not in nones:
            return True
        if op == _RETURN_VALUE:
            if targets is None:
                targets = tuple(dis.findlabels(cast(Any, raw)))  # bytes: typeshed says code
            if before != _LOAD_CONST or before_arg not in nones or offset in targets:
                return True
        before, before_arg = op, arg
    return False
