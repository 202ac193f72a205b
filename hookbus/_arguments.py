"""``ctx.arguments``: a call's arguments by parameter name, bound lazily to the signature.

Nothing here runs unless a hook reads ``ctx.arguments``: a hook point works out
its callable's :class:`Layout` (from ``inspect.signature``) at the first such
read, and each read or write then finds the parameter in ``ctx.args`` /
``ctx.kwargs`` directly, so ``ctx.arguments`` is always in step with them.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, MutableMapping, Optional, Tuple

if TYPE_CHECKING:
    from ._context import CallContext

__all__ = ["Arguments", "Layout", "NoSignatureError", "layout_of"]

_POSITIONAL_ONLY = inspect.Parameter.POSITIONAL_ONLY
_POSITIONAL_OR_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD
_VAR_POSITIONAL = inspect.Parameter.VAR_POSITIONAL
_KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY
_VAR_KEYWORD = inspect.Parameter.VAR_KEYWORD
_EMPTY = inspect.Parameter.empty


class NoSignatureError(TypeError):
    """``ctx.arguments`` was read for a callable that has no signature to bind to."""


class Layout:
    """Where each parameter of a signature sits in ``(args, kwargs)``."""

    __slots__ = ("by_keyword", "index", "names", "parameters", "positional", "var_positional")

    def __init__(self, signature: inspect.Signature, *, drop_first: bool = False) -> None:
        parameters = list(signature.parameters.values())
        if drop_first and parameters and parameters[0].kind in (
            _POSITIONAL_ONLY, _POSITIONAL_OR_KEYWORD,
        ):  # fmt: skip
            parameters = parameters[1:]  # self or cls: ctx.target, never an argument
        self.parameters: Dict[str, inspect.Parameter] = {p.name: p for p in parameters}
        self.names: Tuple[str, ...] = tuple(self.parameters)
        self.positional: List[inspect.Parameter] = [
            p for p in parameters if p.kind in (_POSITIONAL_ONLY, _POSITIONAL_OR_KEYWORD)
        ]
        self.index: Dict[str, int] = {p.name: i for i, p in enumerate(self.positional)}
        self.var_positional: Optional[str] = next(
            (p.name for p in parameters if p.kind is _VAR_POSITIONAL), None
        )
        self.by_keyword = frozenset(
            p.name for p in parameters if p.kind in (_POSITIONAL_OR_KEYWORD, _KEYWORD_ONLY)
        )


def layout_of(fn: Any, name: str, *, drop_first: bool = False) -> Layout:
    """The :class:`Layout` of ``fn``'s signature, or :class:`NoSignatureError` saying why not."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as error:
        raise NoSignatureError(
            f"ctx.arguments needs the signature of hook point {name!r}, and Python has none "
            f"for {fn!r} ({error}); read ctx.args and ctx.kwargs instead"
        ) from None
    return Layout(signature, drop_first=drop_first)


class Arguments(MutableMapping[str, Any]):
    """A call's arguments by parameter name: ``ctx.arguments["rate"]``.

    Its keys are the parameters of the hook point's callable, in order (without
    ``self`` or ``cls``, which are ``ctx.target``). A value is what the caller
    passed, by position or by keyword; a parameter the caller omitted reads as
    its default (``()`` / ``{}`` for ``*args`` / ``**kwargs``) and stays omitted
    from the call unless a hook assigns it. Assigning an argument changes the
    call, keeping the form the caller used (a positional argument stays
    positional; an omitted one is passed by keyword). The keys are fixed:
    deleting one is a ``TypeError``, and an unknown name a ``KeyError`` that lists
    the parameters.

    It always reflects ``ctx.args`` and ``ctx.kwargs``, and writes to them; a
    hook may use either view. It is bound at the first read: hooks that never
    read it cost nothing.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> @bus.hookable("fit")
        ... def fit(data, rate=0.1, *, epochs=1):
        ...     return rate, epochs
        >>> def halve(ctx):
        ...     print(dict(ctx.arguments))
        ...     ctx.arguments["rate"] = ctx.arguments["rate"] / 2
        >>> _ = bus.pre("fit", halve)
        >>> fit([1, 2], 0.4)
        {'data': [1, 2], 'rate': 0.4, 'epochs': 1}
        (0.2, 1)
        >>> fit([1, 2], epochs=3)
        {'data': [1, 2], 'rate': 0.1, 'epochs': 3}
        (0.05, 3)
    """

    __slots__ = ("_ctx", "_layout")

    def __init__(self, ctx: CallContext, layout: Layout) -> None:
        self._ctx = ctx
        self._layout = layout

    def _parameter(self, name: str) -> inspect.Parameter:
        parameter = self._layout.parameters.get(name)
        if parameter is None:
            names = ", ".join(self._layout.names) or "none"
            raise KeyError(
                f"{name!r} is not a parameter of hook point {self._ctx.name!r}; "
                f"its parameters: {names}"
            )
        return parameter

    def __getitem__(self, name: str) -> Any:
        parameter = self._parameter(name)
        layout, args, kwargs = self._layout, self._ctx._args, self._ctx._kwargs
        kind = parameter.kind
        if kind is _POSITIONAL_ONLY or kind is _POSITIONAL_OR_KEYWORD:
            index = layout.index[name]
            if index < len(args):
                return args[index]
            if kind is _POSITIONAL_OR_KEYWORD and name in kwargs:
                return kwargs[name]
        elif kind is _KEYWORD_ONLY:
            if name in kwargs:
                return kwargs[name]
        elif kind is _VAR_POSITIONAL:
            return args[len(layout.positional) :]
        else:  # **kwargs: the keywords no named parameter takes
            return {key: value for key, value in kwargs.items() if key not in layout.by_keyword}
        return self._default(parameter)

    def _default(self, parameter: inspect.Parameter) -> Any:
        if parameter.default is _EMPTY:
            raise TypeError(
                f"the call of hook point {self._ctx.name!r} passes no argument for its "
                f"required parameter {parameter.name!r}"
            )
        return parameter.default

    def __setitem__(self, name: str, value: Any) -> None:
        parameter = self._parameter(name)
        ctx, layout = self._ctx, self._layout
        args, kwargs = ctx._args, ctx._kwargs
        kind = parameter.kind
        # New tuples and dicts, never edits in place: the caller's objects stay as
        # they were, and a dispatcher sees that the arguments changed by identity.
        if kind is _VAR_POSITIONAL:
            head = args[: len(layout.positional)]
            kwargs = dict(kwargs)
            # Extra positional arguments need every named positional one before them.
            head += tuple(self._take(kwargs, p) for p in layout.positional[len(head) :])
            ctx._args, ctx._kwargs = head + tuple(value), kwargs
        elif kind is _VAR_KEYWORD:
            extra = dict(value)
            clash = [key for key in extra if key in layout.by_keyword]
            if clash:
                raise TypeError(
                    f"ctx.arguments[{name!r}] holds the keywords no named parameter takes; "
                    f"{clash[0]!r} is a parameter: assign ctx.arguments[{clash[0]!r}] instead"
                )
            kept = {key: item for key, item in kwargs.items() if key in layout.by_keyword}
            ctx._kwargs = {**kept, **extra}
        elif kind is _KEYWORD_ONLY or name in kwargs:
            ctx._kwargs = {**kwargs, name: value}
        elif layout.index[name] < len(args):
            index = layout.index[name]
            ctx._args = (*args[:index], value, *args[index + 1 :])
        elif kind is _POSITIONAL_OR_KEYWORD:  # omitted: passed by keyword
            ctx._kwargs = {**kwargs, name: value}
        else:  # an omitted positional-only one: those before it get their defaults
            index = layout.index[name]
            fill = tuple(self._default(p) for p in layout.positional[len(args) : index])
            ctx._args = (*args, *fill, value)

    def _take(self, kwargs: Dict[str, Any], parameter: inspect.Parameter) -> Any:
        if parameter.name in kwargs:
            return kwargs.pop(parameter.name)
        return self._default(parameter)

    def __delitem__(self, name: str) -> None:
        self._parameter(name)
        raise TypeError(
            f"ctx.arguments cannot remove {name!r}: its keys are the parameters of hook "
            f"point {self._ctx.name!r}; assign a value instead"
        )

    def __contains__(self, name: object) -> bool:
        return name in self._layout.parameters

    def __iter__(self) -> Iterator[str]:
        return iter(self._layout.names)

    def __len__(self) -> int:
        return len(self._layout.names)

    def __repr__(self) -> str:
        # Values may be secrets or large tensors: name the parameters only.
        return f"<Arguments of {self._ctx.name!r}: {', '.join(self._layout.names)}>"
