"""Event specs: does a hook accept what an event passes, and do emit's arguments bind?

An event's *spec* is the signature of the stub function that declared it. Two
questions are asked of it:

* at registration, whether a hook can be called with every argument list that
  binds to the spec (:func:`hook_mismatch`);
* at emission, whether the arguments bind to the spec, before any hook runs.
  That check must be as cheap as one call of an empty function, so it *is* one:
  :func:`make_binder` builds a function with the spec's parameters and an empty
  body, and Python's own argument binding does the work.

Both only look at parameter names, kinds and whether a default exists: type
annotations are the static type checkers' job.
"""

from __future__ import annotations

import inspect
import keyword
from inspect import CO_VARARGS, CO_VARKEYWORDS, Parameter, Signature
from types import FunctionType
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

__all__ = [
    "CallerFactory",
    "bad_arguments",
    "bind",
    "by_name",
    "code_shape",
    "context_mismatch",
    "describe_call",
    "format_spec",
    "hook_mismatch",
    "make_binder",
    "make_checking_call",
    "spec_of",
]

_POSITIONAL = (Parameter.POSITIONAL_ONLY, Parameter.POSITIONAL_OR_KEYWORD)
_VARIADIC = (Parameter.VAR_POSITIONAL, Parameter.VAR_KEYWORD)


def spec_of(stub: object, what: str) -> Signature:
    """The signature of an event stub, or a ``TypeError`` saying what a stub must be."""
    accepted = (
        "accepted: a plain 'def' function whose parameters are what the event passes, "
        "such as 'def user_created(user: str, *, admin: bool = False) -> None: ...'"
    )
    if not inspect.isfunction(stub):
        raise TypeError(
            f"{what} needs a function as its stub, got {type(stub).__name__} {stub!r}; {accepted}"
        )
    if inspect.iscoroutinefunction(stub) or inspect.isasyncgenfunction(stub):
        raise TypeError(
            f"{what}: the stub {stub.__qualname__} is 'async def'; a stub only declares "
            f"parameters, so make it a plain 'def' (hooks may still be async: use "
            f"emit_async); {accepted}"
        )
    return inspect.signature(stub)


def code_shape(fn: FunctionType) -> Tuple[Any, ...]:
    """What binding a call to the plain function ``fn`` depends on, read from its code.

    Two functions with equal shapes accept exactly the same calls. Unlike
    ``inspect.signature``, this ignores ``__wrapped__`` and ``__signature__``: it
    describes the function that Python really calls.

    Example:
        >>> def a(x, /, y, z=1, *rest, k, **more): ...
        >>> def b(p, /, y, z=2, *others, k, **extra): ...
        >>> code_shape(a) == code_shape(b), code_shape(a) == code_shape(lambda x, y: None)
        (True, False)
    """
    code = fn.__code__
    positional = code.co_argcount
    keyword_only = code.co_varnames[positional : positional + code.co_kwonlyargcount]
    optional = set(fn.__kwdefaults__ or ())
    return (
        code.co_posonlyargcount,
        code.co_varnames[code.co_posonlyargcount : positional],  # passable by name
        len(fn.__defaults__ or ()),
        bool(code.co_flags & CO_VARARGS),
        frozenset(name for name in keyword_only if name not in optional),
        frozenset(name for name in keyword_only if name in optional),
        bool(code.co_flags & CO_VARKEYWORDS),
    )


class _Text(str):
    """An annotation given as a string, shown without quotes."""

    def __repr__(self) -> str:
        return str(self)


def format_spec(name: str, spec: Signature) -> str:
    """``name(params)`` as the stub wrote them, without the return annotation.

    Example:
        >>> def created(user: str, *, admin: bool = False) -> None: ...
        >>> format_spec("user.created", inspect.signature(created))
        'user.created(user: str, *, admin: bool = False)'
    """
    params = [
        param.replace(annotation=_Text(param.annotation))
        if isinstance(param.annotation, str)
        else param
        for param in spec.parameters.values()
    ]
    return f"{name}{spec.replace(parameters=params, return_annotation=Signature.empty)}"


def _parameters(spec: Signature, name: str, first: str = "") -> Tuple[str, Dict[str, Any]]:
    """The source of ``spec``'s parameter list, and the namespace its defaults come from.

    ``first``: one more positional-only parameter before the spec's (with_name's event).
    """
    parts: List[str] = [first, "/"] if first else []
    defaults: Dict[str, Any] = {}
    star_written = False
    for param in spec.parameters.values():
        if not param.name.isidentifier() or keyword.iskeyword(param.name):
            raise TypeError(f"the spec of {name!r} has a parameter named {param.name!r}")
        kind = param.kind
        if kind is Parameter.VAR_POSITIONAL:
            parts.append(f"*{param.name}")
            star_written = True
            continue
        if kind is Parameter.VAR_KEYWORD:
            parts.append(f"**{param.name}")
            continue
        if kind is Parameter.KEYWORD_ONLY and not star_written:
            parts.append("*")
            star_written = True
        if param.default is Parameter.empty:
            parts.append(param.name)
        else:
            default = f"_d{len(defaults)}"
            defaults[default] = param.default
            parts.append(f"{param.name}={default}")
        if kind is Parameter.POSITIONAL_ONLY:
            parts.append("/")
    # Keep only the last "/": every positional-only parameter comes before it.
    if "/" in parts:
        last = len(parts) - 1 - parts[::-1].index("/")
        parts = [part for i, part in enumerate(parts) if part != "/" or i == last]
    return ", ".join(parts), defaults


def _named(function: Any, name: str) -> None:
    """Give a generated function the event's name, which Python's binding errors show."""
    function.__name__ = function.__qualname__ = name
    function.__code__ = function.__code__.replace(co_name=name)  # what Python < 3.11 reports
    function.__module__ = __name__


def make_binder(spec: Signature, name: str) -> Callable[..., None]:
    """A function with the parameters of ``spec`` and an empty body.

    Calling it raises ``TypeError`` exactly when the arguments don't bind to the
    spec, and costs one call of an empty function: the emit check.

    Example:
        >>> def created(user: str, *, admin: bool = False) -> None: ...
        >>> check = make_binder(inspect.signature(created), "user.created")
        >>> check("ada", admin=True)
        >>> check("ada", True)
        Traceback (most recent call last):
        TypeError: user.created() takes 1 positional argument but 2 were given
    """
    parameters, namespace = _parameters(spec, name)
    # Generated source, as dataclasses does for __init__: only identifiers checked
    # above and fixed text go into it, and the body is empty.
    exec(f"def binder({parameters}):\n    pass\n", namespace)
    binder: Callable[..., None] = namespace["binder"]
    _named(binder, name)
    return binder


def make_checking_call(spec: Signature, name: str) -> Optional[CallerFactory]:
    """The factory of callers that check a positional emission and call one hook, or
    ``None`` where a spec's positional check is more than a count.

    For a spec whose parameters are positional without defaults (no ``*args``, no
    required keyword-only parameter), positional arguments bind exactly when there
    are as many as parameters. The caller takes exactly those, by position only, so
    Python's own binding of the caller is the check (a ``TypeError`` at the call,
    before any hook runs), and passes them on as they came: a hook called through it
    gets what it would get called directly, in one frame where the binder and the
    hook took two. By position only: an emission with keywords must not run it.

    Example:
        >>> def saved(path, mode): ...
        >>> factory = make_checking_call(inspect.signature(saved), "saved")
        >>> factory(print)("a.txt", "w")
        a.txt w
        >>> factory(print)("a.txt")
        Traceback (most recent call last):
        TypeError: saved() missing 1 required positional argument: 'mode'
        >>> make_checking_call(inspect.signature(lambda path, mode="w": None), "saved")
    """
    names: List[str] = []
    for param in spec.parameters.values():
        if param.kind in _POSITIONAL and param.default is Parameter.empty:
            names.append(param.name)
        elif param.kind is Parameter.VAR_POSITIONAL or param.kind in _POSITIONAL:
            return None  # a count range, or no bound: the binder checks
        elif param.kind is Parameter.KEYWORD_ONLY and param.default is Parameter.empty:
            return None  # a positional emission never binds: the binder says so
    hook_var = "_hook"
    while hook_var in names:
        hook_var = f"_{hook_var}"
    for each in names:
        if not each.isidentifier() or keyword.iskeyword(each):
            raise TypeError(f"the spec of {name!r} has a parameter named {each!r}")
    parameters = ", ".join([*names, "/"]) if names else ""
    return _compile_callers(name, hook_var, parameters, names, {})


# --- hooks that take the arguments they name (pluggy's rule) -------------------------------

CallerFactory = Callable[[Callable[..., Any]], Callable[..., Any]]
"""Makes, from one hook, the function a dispatch calls instead: it has the spec's
parameters and passes the hook the ones it names."""


def by_name(
    hook: Callable[..., Any], name: str, spec: Signature, *, with_name: bool = False
) -> Tuple[Optional[str], Optional[CallerFactory]]:
    """How ``hook`` takes what the spec passes: ``(reason, factory)``.

    ``(None, None)``: called as it is; its parameters take every call of the spec,
    each at the spec's own place. ``(None, factory)``: it takes the spec's arguments
    by name, some or all (pluggy's rule, so that a spec may grow and old hooks keep
    working); ``factory(hook)`` is the function to call, with the spec's parameters,
    which calls the hook with just those (spec defaults included when the emitter
    leaves them out). ``(reason, None)``: neither; ``reason`` says why.

    Example:
        >>> def paid(order, amount, *, currency="EUR"): ...
        >>> spec = inspect.signature(paid)
        >>> by_name(lambda order, amount, currency="EUR": None, "paid", spec)
        (None, None)
        >>> reason, factory = by_name(lambda currency: print(currency), "paid", spec)
        >>> factory(lambda currency: print(currency))("o-1", 30)
        EUR
        >>> print(by_name(lambda amount, customer: None, "paid", spec)[0])
        it needs 'customer', which event 'paid' doesn't pass (it passes order, amount, currency)
    """
    try:
        signature = inspect.signature(hook)
    except (TypeError, ValueError):
        return None, None  # Python can't tell: accepted, and called as it is
    reason = hook_mismatch(hook, name, spec, with_name=with_name)
    if reason is None and not _out_of_place(signature, spec, with_name):
        return None, None
    call = _by_name_call(signature, spec, with_name)
    if isinstance(call, tuple):
        return None, _caller_factory(spec, name, call, with_name)
    if isinstance(call, str) and call != "-":
        return _needs(call, name, spec), None
    return reason, None  # by name does not apply: as it is, or refused for ``reason``


def _spec_names(spec: Signature) -> List[str]:
    return [p.name for p in spec.parameters.values() if p.kind not in _VARIADIC]


def _out_of_place(signature: Signature, spec: Signature, with_name: bool) -> bool:
    """Whether a positional parameter of the hook is named like a spec parameter at
    another place: called as it is, it would get that other parameter's value."""
    hook = [p.name for p in signature.parameters.values() if p.kind in _POSITIONAL]
    if with_name:
        hook = hook[1:]
    given = [p.name for p in spec.parameters.values() if p.kind in _POSITIONAL]
    names = set(_spec_names(spec))
    return any(
        hook_name in names and given[i] != hook_name
        for i, hook_name in enumerate(hook[: len(given)])
    )


# A by-name call: (positionals in order, keywords), each a spec parameter's name.
_Call = Tuple[List[str], List[str]]


def _by_name_call(
    signature: Signature, spec: Signature, with_name: bool
) -> Union[_Call, str, None]:
    """The call that passes the hook the spec parameters it names: a :data:`_Call`;
    else the name of a parameter it needs that the spec lacks (a str), ``"-"`` if the
    hook takes ``*args`` or ``**kwargs`` (by name does not apply), or None."""
    params = list(signature.parameters.values())
    if with_name:
        if not params or params[0].kind not in _POSITIONAL:
            return None
        params = params[1:]
    if any(p.kind in _VARIADIC for p in params):
        return "-"
    names = set(_spec_names(spec))
    positionals: List[str] = []
    keywords: List[str] = []
    skipped = False  # a positional parameter left to its default: the rest go by name
    for param in params:
        if param.name not in names:
            if param.default is Parameter.empty:
                # A positional-only name says nothing (list.append's 'object'): not by name.
                return None if param.kind is Parameter.POSITIONAL_ONLY else param.name
            skipped = True
            continue
        if param.kind is Parameter.POSITIONAL_ONLY:
            if skipped:
                return None  # can't pass it at its place without the one before
            positionals.append(param.name)
        elif param.kind is Parameter.POSITIONAL_OR_KEYWORD and not skipped:
            positionals.append(param.name)
        else:
            keywords.append(param.name)
    return positionals, keywords


def _needs(missing: str, name: str, spec: Signature) -> str:
    passes = ", ".join(_spec_names(spec)) or "nothing by name"
    return f"it needs {missing!r}, which event {name!r} doesn't pass (it passes {passes})"


def _caller_factory(spec: Signature, name: str, call: _Call, with_name: bool) -> CallerFactory:
    """Compile, once per hook shape, the factory of :func:`by_name`'s callers."""
    taken = set(spec.parameters)
    hook_var, event_var = "_hook", "_event"
    while hook_var in taken or event_var in taken:
        hook_var, event_var = f"_{hook_var}", f"_{event_var}"
    parameters, namespace = _parameters(spec, name, event_var if with_name else "")
    positionals, keywords = call
    passed = ([event_var] if with_name else []) + positionals
    passed += [f"{keyword}={keyword}" for keyword in keywords]
    return _compile_callers(name, hook_var, parameters, passed, namespace)


def _compile_callers(
    name: str, hook_var: str, parameters: str, passed: List[str], namespace: Dict[str, Any]
) -> CallerFactory:
    """The factory of generated callers ``caller(parameters)`` that return
    ``hook(passed)``, each named ``name`` (for Python's binding errors) and wrapping
    its hook; ``namespace`` holds what the parameters' defaults refer to."""
    # Generated source, as for the binder: only checked identifiers and fixed text.
    exec(
        f"def factory({hook_var}):\n"
        f"    def caller({parameters}):\n"
        f"        return {hook_var}({', '.join(passed)})\n"
        f"    return caller\n",
        namespace,
    )
    make = namespace["factory"]

    def factory(hook: Callable[..., Any]) -> Callable[..., Any]:
        caller = make(hook)
        _named(caller, name)
        caller.__wrapped__ = hook  # which hook it calls: error notes name that one
        return caller  # type: ignore[no-any-return]

    return factory


def bad_arguments(
    name: str, spec: Signature, args: Tuple[Any, ...], kwargs: Dict[str, Any]
) -> Optional[TypeError]:
    """The error for an emission whose arguments don't bind to the spec, or None."""
    try:
        bind(spec, args, kwargs)
    except TypeError as error:
        # Shapes, never values: the arguments may be passwords or large tensors.
        shown = ", ".join(
            [*map(_type_name, args), *(f"{k}={_type_name(v)}" for k, v in kwargs.items())]
        )
        return TypeError(
            f"event {name!r} was emitted with arguments that don't match its spec "
            f"{format_spec(name, spec)}: got ({shown}), {error}; no hook was called"
        )
    return None


def bind(signature: Signature, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
    """``signature.bind(*args, **kwargs)`` as Python binds a real call.

    A keyword named like a positional-only parameter goes into ``**kwargs`` if
    there is one, and is an error if not. ``Signature.bind`` gets that wrong before
    Python 3.13 (it refuses the first) and in 3.13.0 (it accepts the second when the
    parameter has a default), so it is decided here.
    """
    params = signature.parameters.values()
    if kwargs:
        positional_only = {p.name for p in params if p.kind is Parameter.POSITIONAL_ONLY}
        clash = positional_only & kwargs.keys()
        if clash:
            if not any(p.kind is Parameter.VAR_KEYWORD for p in params):
                raise TypeError(
                    f"{sorted(clash)[0]!r} parameter is positional only, but was passed as a "
                    f"keyword"
                )
            kwargs = {(f"**{k}" if k in clash else k): v for k, v in kwargs.items()}
    signature.bind(*args, **kwargs)


def _type_name(value: Any) -> str:
    return type(value).__name__


# --- does a hook accept the spec ----------------------------------------------------------


def _spec_calls(
    spec: Signature, hook_positional: int
) -> Iterator[Tuple[List[str], List[str], List[str]]]:
    """Representative calls binding to ``spec``: (positionals, fewest keywords, most keywords).

    A call fails to bind to a hook either because something is *missing* (fewer
    arguments only make that worse) or because something is in *excess* (too many
    positionals, an unexpected keyword, a value given twice; more arguments only
    make that worse). For a given number of positionals, the call with the fewest
    keywords is the worst case of the first, the call with the most the worst case
    of the second, so trying both for every number of positionals decides whether
    every call that binds to the spec binds to the hook.
    """
    params = list(spec.parameters.values())
    positional = [p for p in params if p.kind in _POSITIONAL]
    keyword_only = [p for p in params if p.kind is Parameter.KEYWORD_ONLY]
    var_positional = any(p.kind is Parameter.VAR_POSITIONAL for p in params)
    required_positional_only = [
        i
        for i, p in enumerate(positional)
        if p.kind is Parameter.POSITIONAL_ONLY and p.default is Parameter.empty
    ]
    fewest = required_positional_only[-1] + 1 if required_positional_only else 0
    most = len(positional)
    if var_positional:  # beyond what the hook can take by position, one more
        most = max(most, hook_positional) + 1
    for count in range(most, fewest - 1, -1):  # the most natural call first
        names = [p.name for p in positional[:count]]
        names += [f"*{i}" for i in range(len(names), count)]  # extras, into *args
        keywords = [p for p in positional[count:] if p.kind is Parameter.POSITIONAL_OR_KEYWORD]
        keywords += keyword_only
        fewest_keywords = [p.name for p in keywords if p.default is Parameter.empty]
        yield names, fewest_keywords, [p.name for p in keywords]


def _extra_keywords(spec: Signature, hook: Signature) -> List[str]:
    """The keywords that a spec with ``**kwargs`` passes on, worst case for ``hook``.

    Any name at all may go into the spec's ``**kwargs`` except its own named
    parameters: the hook's own parameter names (which may clash with a value it
    already got), the spec's positional-only names, and one name the hook cannot
    expect, standing for all the others.
    """
    if not any(p.kind is Parameter.VAR_KEYWORD for p in spec.parameters.values()):
        return []
    taken = {p.name for p in spec.parameters.values() if p.kind is not Parameter.POSITIONAL_ONLY}
    extra = {p.name for p in spec.parameters.values() if p.kind is Parameter.POSITIONAL_ONLY}
    extra |= {p.name for p in hook.parameters.values() if p.kind not in _VARIADIC}
    other = "other"
    while other in extra or other in taken:
        other += "_"
    return [*sorted(extra - taken), f"**{other}"]


def context_mismatch(hook: Callable[..., Any]) -> Optional[str]:
    """``hook`` as it is written, if it can't be called as ``hook(ctx)``; else None.

    Every hook around a call (pre, post, exception, around, and an adapter's own
    kinds) is called with one argument, the call's context. A hook whose signature
    Python cannot tell (some builtins) is accepted.

    Example:
        >>> context_mismatch(lambda ctx: None) is None, context_mismatch(print) is None
        (True, True)
        >>> context_mismatch(lambda module, args, output: None)
        '<lambda>(module, args, output)'
    """
    if hook.__class__ is FunctionType:  # the common case, read from the code
        code = hook.__code__
        required = code.co_argcount - len(hook.__defaults__ or ())
        keyword_only = code.co_kwonlyargcount - len(hook.__kwdefaults__ or ())
        takes_one = code.co_argcount or code.co_flags & CO_VARARGS
        if takes_one and required <= 1 and not keyword_only:
            return None
    try:  # what Python calls: a function's own code, not what it wraps
        signature = inspect.signature(hook, follow_wrapped=hook.__class__ is not FunctionType)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(None)
    except TypeError:
        params = [p.replace(annotation=Parameter.empty) for p in signature.parameters.values()]
        plain = signature.replace(parameters=params, return_annotation=Signature.empty)
        name = getattr(hook, "__qualname__", None) or type(hook).__qualname__
        return f"{name.rpartition('.<locals>.')[2]}{plain}"
    return None


def hook_mismatch(
    hook: Callable[..., Any], name: str, spec: Signature, *, with_name: bool = False
) -> Optional[str]:
    """Why ``hook`` cannot take every call the spec allows, or None if it can.

    ``with_name`` hooks get the event's name first. A hook whose signature Python
    cannot tell (some builtins) is accepted.

    Example:
        >>> def created(user, *, admin=False): ...
        >>> spec = inspect.signature(created)
        >>> hook_mismatch(lambda user, **kwargs: None, "created", spec) is None
        True
        >>> print(hook_mismatch(lambda user: None, "created", spec))
        called as hook(user, admin=...) it fails: got an unexpected keyword argument 'admin'
    """
    try:
        signature = inspect.signature(hook)
    except (TypeError, ValueError):
        return None
    hook_positional = sum(p.kind in _POSITIONAL for p in signature.parameters.values())
    extra_keywords = _extra_keywords(spec, signature)
    for positionals, fewest, most in _spec_calls(spec, hook_positional):
        names = (["event"] if with_name else []) + positionals
        for keywords in (fewest, most + extra_keywords):
            try:
                bind(signature, tuple(names), dict.fromkeys(k.lstrip("*") for k in keywords))
            except TypeError as error:
                call = describe_call("hook", names, keywords)
                return f"called as {call} it fails: {error}{_positional_hint(spec, keywords)}"
    return None


def _positional_hint(spec: Signature, keywords: List[str]) -> str:
    """When the failing call names a parameter that callers may mean as positional only."""
    named = [
        p.name
        for p in spec.parameters.values()
        if p.kind is Parameter.POSITIONAL_OR_KEYWORD and p.name in keywords
    ]
    if not named:
        return ""
    last = named[-1]
    return (
        f" (the spec lets callers pass {', '.join(map(repr, named))} by name; if they never "
        f"do, make {'it' if len(named) == 1 else 'them'} positional-only in the stub: "
        f"'{last}, /')"
    )


def describe_call(callee: str, positionals: List[str], keywords: List[str]) -> str:
    """``callee(a, b, c=...)``, naming what a call passes.

    Example:
        >>> describe_call("hook", ["user", "*2"], ["admin", "**other"])
        'hook(user, <extra>, admin=..., **other)'
    """
    shown = [("<extra>" if p.startswith("*") else p) for p in positionals]
    shown += [(k if k.startswith("**") else f"{k}=...") for k in keywords]
    return f"{callee}({', '.join(shown)})"
