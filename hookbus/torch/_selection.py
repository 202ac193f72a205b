"""Selection: which modules of a model a selector names.

A selector is a name or glob pattern, a module, a module type, or a list of
those (:data:`Selector`). :func:`select` turns one into the names of the
modules it selects, in model order, or raises an error that lists close names;
an attachment, a capture, a patch and ``stats()`` all select through it, so
they name and select alike. The model itself is :data:`ROOT` when it has no
other name.
"""

from __future__ import annotations

import difflib
from typing import (
    AbstractSet,
    Any,
    Callable,
    Iterable,
    List,
    Mapping,
    Optional,
    Tuple,
    Type,
    Union,
)

from torch import nn
from typing_extensions import Protocol

from ..adapter import check_name, is_pattern, matcher_for

__all__ = [
    "ROOT",
    "GroupSelector",
    "HasModule",
    "Selector",
    "close_or_first_names",
    "literal_pattern",
    "select",
]

ROOT = "<root>"
"""The name of the attached model itself when no prefix is given."""

GroupSelector = Union[Type[nn.Module], List[Any], Tuple[Any, ...], AbstractSet[Any]]
"""Selectors that may select many modules: a module type, or a list of selectors."""

Selector = Union[str, nn.Module, GroupSelector]
"""What selects modules: a name or glob, a module, a module type, or a list of those."""


class HasModule(Protocol):
    """What selection needs of a module's entry: the module (an attachment's point,
    or a capture's :class:`~hookbus.torch._unwrap.ModuleName`)."""

    @property
    def module(self) -> Optional[nn.Module]:
        """The module, or ``None`` once it was garbage collected."""
        ...


def select(
    points: Mapping[str, HasModule], selector: Selector, name_of: Callable[[nn.Module], str]
) -> List[str]:
    """The names of ``points`` that ``selector`` selects, in model order; an error if none.

    See :meth:`Attachment.select <hookbus.torch.Attachment.select>`.
    """
    if isinstance(selector, str):
        check_name(selector, "module selector", allow_pattern=True)
        if selector in points or not is_pattern(selector):  # a module's own name: literal
            if selector not in points:
                raise ValueError(
                    f"no module named {selector!r}{close_or_first_names(points, selector)}"
                )
            return [selector]
        if selector == "*":  # the default of capture() and stats(): every name matches
            return list(points)
        match = matcher_for(selector)
        names = [name for name in points if match(name)]
        if not names:
            raise ValueError(
                f"no module name matches {selector!r}{close_or_first_names(points, selector)}"
            )
        return names
    if isinstance(selector, nn.Module):
        return [name_of(selector)]
    if isinstance(selector, type):
        if not issubclass(selector, nn.Module):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f"cannot select modules by the type {selector.__name__}: it is not an "
                f"nn.Module subclass"
            )
        names = [name for name, point in points.items() if isinstance(point.module, selector)]
        if not names:
            present = sorted({type(p.module).__name__ for p in points.values()})
            raise ValueError(
                f"no module of type {selector.__name__} in the model; its types: "
                f"{', '.join(present)}"
            )
        return names
    if isinstance(selector, (list, tuple, set, frozenset)):
        items: Iterable[Any] = selector  # pyright: ignore[reportUnknownVariableType]
        chosen = {name for item in items for name in select(points, item, name_of)}
        if not chosen:
            raise ValueError("an empty list of selectors selects no module")
        return [name for name in points if name in chosen]
    raise TypeError(
        f"cannot select modules with {type(selector).__name__} {selector!r}; accepted: a "
        f"name or glob pattern ('layers.*'), a module of the model, a module type "
        f"(nn.Linear), or a list of those"
    )


def close_or_first_names(points: Mapping[str, Any], name: str) -> str:
    """The end of an error message: names close to ``name``, else the first few names."""
    close = difflib.get_close_matches(name, list(points), n=5, cutoff=0.5)
    if close:
        return f"; close names: {', '.join(map(repr, close))}"
    shown = list(points)[:8]
    more = ", ..." if len(points) > 8 else ""
    return f"; the model's names: {', '.join(map(repr, shown))}{more}"


def literal_pattern(name: str) -> str:
    """``name`` as a glob pattern that matches exactly ``name`` (fnmatch's escape)."""
    if not is_pattern(name):
        return name
    return "".join(f"[{char}]" if char in "*?[" else char for char in name)
