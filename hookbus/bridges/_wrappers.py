"""Wrappers a bridge puts on one trainer's methods, per instance, and how to take them off.

A trainer without a callback for some moment (Hugging Face before a prediction step, or when a
run raises; mmengine when a run raises) is reached by wrapping that method on the trainer
object itself: the instance attribute shadows the class's method, so the class and every other
trainer are untouched. :meth:`MethodWrappers.restore` takes each wrapper off again, leaving the
attribute as it found it.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Tuple

Wrapper = Callable[..., Any]


class MethodWrappers:
    """The wrappers put on ``target``'s methods, newest last, and what each replaced."""

    def __init__(self, target: Any) -> None:
        self._target = target
        # (name, the wrapper, whether the instance had its own attribute, and that attribute)
        self._patched: List[Tuple[str, Wrapper, bool, Any]] = []

    def wrap(self, name: str, make: Callable[[Wrapper], Wrapper]) -> None:
        """Replace ``target.name`` on the instance with ``make(the current bound method)``."""
        own = _attributes(self._target)
        had_own, previous = name in own, own.get(name)
        original: Wrapper = getattr(self._target, name)
        wrapper = functools.wraps(original)(make(original))
        setattr(self._target, name, wrapper)
        self._patched.append((name, wrapper, had_own, previous))

    def restore(self) -> List[str]:
        """Take the wrappers off; return the names another wrapper now covers (left on).

        A wrapper left on must pass calls through from then on: the bridge's relay, closed
        with the connection, sends nothing.
        """
        covered: List[str] = []
        own = _attributes(self._target)
        for name, wrapper, had_own, previous in reversed(self._patched):
            if own.get(name) is not wrapper:
                covered.append(name)
            elif had_own:
                setattr(self._target, name, previous)
            else:
                delattr(self._target, name)
        self._patched.clear()
        return covered


def _attributes(target: Any) -> Dict[str, Any]:
    """A copy of ``target``'s own attributes (its ``__dict__``)."""
    attributes: Dict[str, Any] = target.__dict__
    return dict(attributes)
