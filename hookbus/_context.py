"""The call context: the one shape every pre, post and exception hook receives.

:class:`CallContext` is what a hook sees of one call; :class:`Arguments` is its
``ctx.arguments`` view, bound lazily to the wrapped callable's :class:`Layout`
(worked out from ``inspect.signature`` at the first read), so a hook that never
reads it costs nothing, and each read or write finds the parameter in
``ctx.args`` / ``ctx.kwargs`` directly.
"""

from __future__ import annotations

import inspect
from typing import (
    Any,
    Dict,
    Generic,
    Iterator,
    List,
    MutableMapping,
    Optional,
    Tuple,
    overload,
)

from typing_extensions import TypeVar

__all__ = [
    "Arguments",
    "CallContext",
    "Layout",
    "NoSignatureError",
    "RareState",
    "layout_of",
    "rebind",
    "reject_returned",
]

_new_object = object.__new__

R = TypeVar("R", default=Any)
"""What the hook point's callable returns: the type of ``ctx.result`` (``Any`` when unsaid)."""


class CallContext(Generic[R]):
    """What a pre, post or exception hook sees of one call, and how it changes it.

    Every hook around a call has the same shape, ``hook(ctx) -> None``, whether the
    call is a decorated function, a method, or a ``torch.nn.Module`` (through
    :mod:`hookbus.torch`). A hook changes the call only by assigning to the context,
    never by returning a value: returning anything but ``None`` raises ``TypeError``,
    so a stray return (torch's classic trap: a lambda that returns a handle) can
    never silently replace an output.

    One rule for methods: ``args``, ``kwargs`` and ``arguments`` are the arguments
    the caller passed, never the instance or class a method is bound to. That one
    is ``target``, whether the method was decorated in its class body, wrapped
    bound (``bus.wrap(obj.method)``) or is a torch module's forward; so a hook on
    ``def rev(self, rpm)`` unpacks ``(rpm,) = ctx.args``, and reads the instance
    as ``ctx.target``.

    Attributes:
        name: the hook point's name (for a module, its qualified name).
        target: what the call is about: the instance for a method, the class for a
            classmethod, the module for torch, the object of a bound method, else
            the wrapped callable itself.
        phase: ``"pre"``, ``"post"`` or ``"exception"`` (torch adds its own phases).
        args: the positional arguments. A pre hook may assign a new tuple.
        kwargs: the keyword arguments. A pre hook may assign a new dict.
        arguments: the arguments by parameter name (see :class:`Arguments`); a
            pre hook may assign ``ctx.arguments["rate"] = 0.1``.
        result: the return value, in post hooks. Assign to replace it (``None`` too).
            A pre hook cannot: it calls :meth:`skip` instead.
        skipped: whether a pre hook called :meth:`skip`.
        exception: the error the call raised, in exception hooks; else ``None``.
        call_index: numbers the calls of this hook point that ran hooks, from 0, so
            the hooks of one call can be told from those of the next.
        data: a dict private to this call, shared by its pre, post and exception
            hooks (a pre hook stores a start time, the post hook reads it).

    For type checkers, ``CallContext[R]`` is the context of a callable that returns
    ``R``: ``ctx.result`` is an ``R``, and so must be what a hook assigns to it or
    passes to :meth:`recover` and :meth:`skip`. A bare ``CallContext`` is
    ``CallContext[Any]``. The hooks registered through a typed hook point
    (``f.post``, see :class:`TypedPoint`) get the right ``R`` from ``f``.

    Example:
        >>> import hookbus
        >>> bus = hookbus.EventBus()
        >>> @bus.hookable("scale")
        ... def scale(x, factor=2):
        ...     return x * factor
        >>> def triple(ctx):
        ...     ctx.kwargs = {**ctx.kwargs, "factor": 3}
        >>> def add_one(ctx):
        ...     ctx.result = ctx.result + 1
        >>> _ = bus.pre("scale", triple)
        >>> _ = bus.post("scale", add_one)
        >>> scale(10)
        31
    """

    # Eight slots, each filled by every call. What few calls need (a skip, a recovery,
    # the error, ctx.data) shares one with the hook point: ``_rare`` is the point until
    # a hook needs rare state, then a RareState that holds the point (see ``_point``).
    __slots__ = (
        "_args",
        "_kwargs",
        "_rare",
        "_result",
        "call_index",
        "name",
        "phase",
        "target",
    )

    def __init__(
        self,
        name: str,
        target: Any,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        call_index: int = 0,
        phase: str = "pre",
        point: Optional[Any] = None,
    ) -> None:
        self.name = name
        self.target = target
        self._args: Tuple[Any, ...] = args
        self._kwargs: Dict[str, Any] = kwargs
        self.call_index = call_index
        self.phase = phase
        self._result: Any = None
        # The hook point (see _point), until a hook needs a RareState.
        self._rare: Any = point
        # for_call() below builds the same fields, faster, for dispatchers.

    @classmethod
    def for_call(
        cls,
        name: str,
        target: Any,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        call_index: int,
        phase: str = "pre",
        point: Optional[Any] = None,
        result: Any = None,
    ) -> CallContext[Any]:
        """``CallContext(name, target, args, kwargs, call_index, phase, point)``, only faster.

        For dispatchers (the core's and adapters'), which build one context per
        hooked call: CPython can't inline a call through ``type.__call__`` into
        ``__init__``, and this saves about 30 ns a context. ``result`` starts a post
        phase's context with the call's result (no setter on the hot path); a
        dispatcher keeps the classmethod in a variable, as binding it on each
        access costs as much again. Every parameter may be passed by keyword, and
        code that reads better so should (``point=self``); a dispatcher's per-call
        line passes them by position, and there is no keyword-only parameter:
        CPython (3.11, 3.12) specializes neither a call with keywords nor a
        function with keyword-only parameters, and either made a hooked call 6-8%
        slower. Keep in step with ``__init__`` (parity: ``tests/test_fast_copies.py``).

        Example:
            >>> from hookbus import CallContext
            >>> ctx = CallContext.for_call("load", None, ("a",), {}, 0)
            >>> type(ctx) is CallContext, ctx.args, ctx.phase
            (True, ('a',), 'pre')
        """
        ctx: CallContext[Any] = _new_object(cls)
        ctx.name = name
        ctx.target = target
        ctx._args = args
        ctx._kwargs = kwargs
        ctx.call_index = call_index
        ctx.phase = phase
        ctx._result = result
        ctx._rare = point
        return ctx

    @property
    def _point(self) -> Any:
        """The hook point: it gives ctx.arguments its signature, and says whether the
        call can be skipped; ``None`` for a context made by hand. Kept in ``_rare``
        (one store less per call), or in the RareState that replaced it there."""
        rare = self._rare
        return rare.point if type(rare) is RareState else rare

    def _rare_state(self) -> RareState:
        """This call's own :class:`RareState`, to write to: made at the first need (a
        context belongs to one call, whose hooks run one at a time: no two threads make
        it at once), in place of the point it then holds."""
        rare = self._rare
        if type(rare) is not RareState:
            made = RareState()  # every field set here: see RareState
            made.point = rare
            made.exception = None
            made.data = None
            made.recovered = False
            made.skipped = False
            rare = self._rare = made
        return rare

    def __reduce_ex__(self, protocol: object) -> Any:
        raise TypeError(
            f"{self!r} cannot be pickled or copied: a context belongs to one running call "
            f"and refers to its hook point. Keep what you need instead: ctx.args, "
            f"ctx.kwargs, ctx.result or ctx.data"
        )

    @property
    def args(self) -> Tuple[Any, ...]:
        """The positional arguments; a pre hook may assign a new tuple."""
        return self._args

    @args.setter
    def args(self, value: Tuple[Any, ...]) -> None:
        checked: object = value
        if not isinstance(checked, tuple):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f"ctx.args must be a tuple, got {type(checked).__name__}; "
                f"assign a tuple such as (x,) or ()"
            )
        self._args = tuple(value)  # a plain tuple, even from a namedtuple

    @property
    def kwargs(self) -> Dict[str, Any]:
        """The keyword arguments; a pre hook may assign a new dict."""
        return self._kwargs

    @kwargs.setter
    def kwargs(self, value: Dict[str, Any]) -> None:
        checked: object = value
        if not isinstance(checked, dict):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f"ctx.kwargs must be a dict of str to value, got {type(checked).__name__}; "
                f"assign a dict such as {{'factor': 3}} or {{}}"
            )
        keys: List[object] = list(value)
        bad = [key for key in keys if not isinstance(key, str)]
        if bad:
            raise TypeError(
                f"ctx.kwargs keys must be str, got a key of type {type(bad[0]).__name__}"
            )
        self._kwargs = value

    @property
    def arguments(self) -> Arguments:
        """The arguments by parameter name, bound to the callable's signature.

        Bound at the first read (hooks that never read it cost nothing); a
        callable without a signature (some builtins) raises ``TypeError``.
        """
        point = self._point
        if point is None:
            raise NoSignatureError(
                f"this CallContext of {self.name!r} was made without a hook point, so it has "
                f"no signature to bind ctx.arguments to; read ctx.args and ctx.kwargs instead"
            )
        layout: Layout = point.layout()
        return Arguments(self, layout)  # not kept: it refers back to this context

    @property
    def result(self) -> R:
        """The return value, in post hooks; assign to replace it (``None`` too)."""
        result: R = self._result
        return result

    @result.setter
    def result(self, value: R) -> None:
        if self.phase == "pre":
            raise RuntimeError(
                f"a pre hook of {self.name!r} cannot set ctx.result: the call has not run, "
                f"and its return value would replace what was set. To skip the call and "
                f"return a value instead, call ctx.skip(value)"
            )
        self._result = value

    @property
    def skipped(self) -> bool:
        """Whether a pre hook called :meth:`skip`: the callable did not run."""
        rare = self._rare
        return type(rare) is RareState and rare.skipped

    @property
    def exception(self) -> Optional[BaseException]:
        """The error the call raised (exception hooks only), else ``None``."""
        rare = self._rare
        return rare.exception if type(rare) is RareState else None

    @property
    def recovered(self) -> bool:
        """Whether an exception hook called :meth:`recover`."""
        rare = self._rare
        return type(rare) is RareState and rare.recovered

    @property
    def data(self) -> Dict[str, Any]:
        """A dict private to this call, shared by all its hooks."""
        rare = self._rare  # kept there: a call whose hooks never read ctx.data stores nothing
        if type(rare) is not RareState:
            rare = self._rare_state()
        data = rare.data
        if data is None:
            data = rare.data = {}
        return data

    @overload
    def recover(self) -> None: ...

    @overload
    def recover(self, value: R) -> None: ...

    def recover(self, value: Any = None) -> None:
        """From an exception hook: swallow the error and make the call return ``value``.

        The remaining exception hooks are skipped, and the post hooks then run on
        ``value`` as if the call had returned it. To replace the error instead,
        raise another one from the hook; to observe it, just return.

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.hookable("parse")
            ... def parse(text):
            ...     return int(text)
            >>> _ = bus.exception("parse", lambda ctx: ctx.recover(0))
            >>> parse("12"), parse("oops")
            (12, 0)
        """
        if self.phase != "exception":
            raise RuntimeError(
                f"ctx.recover() is for exception hooks; this is a {self.phase!r} hook"
            )
        rare = self._rare_state()  # made when the error was set, unless made by hand
        rare.recovered = True
        self._result = value

    @overload
    def skip(self) -> None: ...

    @overload
    def skip(self, value: R) -> None: ...

    def skip(self, value: Any = None) -> None:
        """From a pre hook: don't call the callable; the call returns ``value``.

        For a cache hit or a dry run. The other pre hooks still run (and see
        :attr:`skipped`), then the post hooks run on ``value`` as if the call had
        returned it, with ``ctx.skipped`` true. A second ``skip`` replaces the value.

        On a torch module the forward is skipped too (``hookbus.torch`` swaps the
        module's ``forward`` for one that can skip while the module has pre hooks).

        Example:
            >>> import hookbus
            >>> bus = hookbus.EventBus()
            >>> @bus.hookable("load")
            ... def load(key):
            ...     print("loading", key)
            ...     return key.upper()
            >>> cache = {"a": "cached A"}
            >>> def from_cache(ctx):
            ...     if ctx.args[0] in cache:
            ...         ctx.skip(cache[ctx.args[0]])
            >>> _ = bus.pre("load", from_cache)
            >>> load("a")
            'cached A'
            >>> load("b")
            loading b
            'B'
        """
        if self.phase != "pre":
            instead = " (to return a value instead of the error: ctx.recover(value))"
            raise RuntimeError(
                f"ctx.skip() is for pre hooks; this is a {self.phase!r} hook"
                + (instead if self.phase == "exception" else "")
            )
        point = self._point
        refusal = None if point is None else point.skip_refusal
        if refusal is not None:
            raise RuntimeError(refusal)
        self._rare_state().skipped = True
        self._result = value

    def __repr__(self) -> str:
        # Argument values may be secrets or large tensors: show their count, not them.
        target = type(self.target).__name__ if self.target is not None else None
        exception = self.exception
        extra = f" exception={type(exception).__name__}" if exception else ""
        extra += " skipped" if self.skipped else ""
        return (
            f"<CallContext {self.phase} {self.name!r} target={target} "
            f"call_index={self.call_index} args={len(self._args)} "
            f"kwargs={sorted(self._kwargs)}{extra}>"
        )


class RareState:
    """What few calls need of their context, apart from it: a call that needs none of
    it stores its hook point in ``CallContext._rare`` instead of five fields.

    ``skipped`` and ``recovered``: whether a hook called ``ctx.skip()`` or
    ``ctx.recover()``; ``exception``: the error the exception hooks see; ``data``:
    ``ctx.data``, made at its first read (``None`` until then); ``point``: the hook
    point it replaced in ``_rare`` (``ctx._point``). One per call that needs it, made
    by ``CallContext._rare_state``. Tested by ``type(rare) is RareState`` (a point is
    never one), so no subclass.
    """

    __slots__ = ("data", "exception", "point", "recovered", "skipped")
    # No __init__: CallContext._rare_state sets every field (calling a class with an
    # __init__ costs twice what the stores do, on the exception hooks' path).
    data: Optional[Dict[str, Any]]
    exception: Optional[BaseException]
    point: Any
    recovered: bool
    skipped: bool


def rebind(
    ctx: CallContext,
    phase: str,
    target: Any,
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
    exception: Optional[BaseException] = None,
) -> None:
    """Move ``ctx`` to another phase of the same call, with the call's arguments.

    For adapters whose framework splits one call across native hooks (torch runs
    a forward's pre and post hooks from two separate callbacks): the pre phase's
    context is kept, without the arguments, and rebound when the post or
    exception phase begins, so ``ctx.data`` is shared by the call's hooks.
    ``exception`` is the error the exception phase sees; with ``None`` (moving on
    to the post phase, or once the exception hooks ran) the context lets go of the
    error it held: that error's traceback holds the frames that hold the context,
    and with them the call's arguments, a reference cycle. Published in
    :mod:`hookbus.adapter`.
    """
    ctx.phase = phase
    ctx.target = target
    ctx._args = args
    ctx._kwargs = kwargs
    if exception is not None or type(ctx._rare) is RareState:
        ctx._rare_state().exception = exception


_HOW_TO_CHANGE = {
    "grad": "replace the gradient by assigning ctx.result = new_grad",
}


def reject_returned(hook: object, ctx: CallContext, returned: Any) -> None:
    """Raise for a hook that returned ``returned`` (not None): hooks change a call via ``ctx``.

    The one place that says so, for every hook around a call (the torch adapter's
    included). ``hook`` is shown in the message: a handle, or the callable.

    Example:
        >>> from hookbus._context import CallContext, reject_returned
        >>> ctx = CallContext("load", None, (), {}, phase="post")
        >>> reject_returned("my_hook", ctx, 3)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        TypeError: post hook 'my_hook' on 'load' returned int, not None; hooks change a call ...
    """
    if inspect.iscoroutine(returned):
        returned.close()  # never leave an un-awaited coroutine behind
        raise TypeError(
            f"{ctx.phase} hook {hook!r} returned a coroutine on the sync hook point "
            f"{ctx.name!r}; async hooks need an async hook point (an 'async def' function)"
        )
    how = _HOW_TO_CHANGE.get(
        ctx.phase,
        "hooks change a call by assigning to the context (ctx.args = ..., "
        "ctx.kwargs = ..., ctx.result = ..., ctx.recover(value))",
    )
    raise TypeError(
        f"{ctx.phase} hook {hook!r} on {ctx.name!r} returned "
        f"{type(returned).__name__}, not None; {how}"
    )


# --- ctx.arguments: the arguments by parameter name ----------------------------------

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
        forward = getattr(fn, "forward", None)
        if _passes_everything(signature) and inspect.ismethod(forward):
            # A callable object whose __call__ hands everything to its forward method,
            # as a torch nn.Module does (bus.wrap(model)): the arguments are forward's.
            signature = inspect.signature(forward)
    except (TypeError, ValueError) as error:
        raise NoSignatureError(
            f"ctx.arguments needs the signature of hook point {name!r}, and Python has none "
            f"for {type(fn).__name__} {_name_of(fn)!r} ({error}); read ctx.args and ctx.kwargs "
            f"instead"
        ) from None
    return Layout(signature, drop_first=drop_first)


def _name_of(fn: Any) -> str:
    """The name a callable was defined with: what a reader finds in its source."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__


def _passes_everything(signature: inspect.Signature) -> bool:
    """Whether the signature is ``(*args, **kwargs)`` alone."""
    kinds = [parameter.kind for parameter in signature.parameters.values()]
    return kinds == [_VAR_POSITIONAL, _VAR_KEYWORD]


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
        elif kind is _KEYWORD_ONLY or (kind is _POSITIONAL_OR_KEYWORD and name in kwargs):
            # (A positional-only parameter's name in kwargs is a key of **kwargs.)
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
        if parameter.kind is _POSITIONAL_OR_KEYWORD and parameter.name in kwargs:
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
