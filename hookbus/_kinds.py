"""What is valid where: the hook kinds, the point kinds, and which runs at which.

One table, as data, read by everything that decides: registration (an unknown kind,
a hook of the wrong shape, an option its kind does not take, a kind that can never
run at a declared event), a strict bus and ``check_pending()`` (one rule,
:func:`known_names`, with one hint, :func:`other_namespace`), ``@listens`` and
``subscribe``, the plans dispatch runs (an event runs the kinds of its row; a
hook point, those of its own), and the docs (:func:`render_markdown` writes the
tables of docs/concepts.md, and a test keeps the page equal to it).

A :class:`HookKind` says what a hook must be; a :class:`PointKind` says which hook
kinds a dispatch of that point runs, and what it guarantees there. The core
declares its own rows here; an adapter adds its own through ``hookbus.adapter``
(:func:`add_hook_kind`, :func:`add_point_kind`), as ``hookbus.torch`` does for
modules, operation points and ``every_module``: the core never names them.

This module imports nothing of hookbus: every layer may read it.
"""

from __future__ import annotations

import threading
from typing import (
    AbstractSet,
    Dict,
    FrozenSet,
    Iterable,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Set,
    Tuple,
)

__all__ = [
    "AT_POINTS",
    "CORE_HOOK_KINDS",
    "DECLARED_EVENT",
    "EVENT",
    "EVENT_RUNS",
    "GENERATOR",
    "HOOK_KINDS",
    "PLAIN",
    "HookKind",
    "PointKind",
    "add_hook_kind",
    "add_point_kind",
    "hook_kind",
    "hook_kinds",
    "known_names",
    "methods",
    "other_namespace",
    "point_kind",
    "point_kinds",
    "refuses_others",
    "render_markdown",
    "runs_at_points",
    "where_it_runs",
]

PLAIN = "plain"
"""The shape of most hooks: a callable that is not a generator function."""
GENERATOR = "generator"
"""The shape of an around hook: a generator function (an async one on async rows)."""

_OPTIONS = frozenset({"priority", "once", "target", "weak", "optional"})


class HookKind(NamedTuple):
    """One kind of hook: how it is registered, what shape it must have, what it takes.

    Example:
        >>> from hookbus._kinds import hook_kind
        >>> around = hook_kind("around")
        >>> around.method, around.shape, "with_name" in around.options
        ('around', 'generator', False)
    """

    name: str
    """The kind's name, as handles show it (``handle.kind``)."""
    method: str
    """The registering method (``bus.on`` for ``"event"``), named in messages."""
    shape: str
    """:data:`PLAIN` or :data:`GENERATOR`: what the callable must be."""
    takes_context: bool
    """Called as ``hook(ctx)`` with a ``CallContext`` (else with what was emitted)."""
    options: FrozenSet[str]
    """The registration options it takes."""
    called: str
    """How it is called, for the docs."""


class PointKind(NamedTuple):
    """One kind of place hooks run: which hook kinds its dispatch runs, and how.

    ``name`` is what a hook point's ``kind`` says (``bus.points()``); events have the
    rows :data:`EVENT` and :data:`DECLARED_EVENT`.

    Example:
        >>> from hookbus._kinds import point_kind
        >>> point_kind("declared event").runs
        ('event', 'around')
    """

    name: str
    """The point kind's name (a point's ``kind``)."""
    runs: Tuple[str, ...]
    """The hook kinds a dispatch of it runs."""
    what: str
    """What it is, for the docs."""
    target: str
    """What ``target=`` matches there, for the docs."""
    skip_refusal: Optional[str]
    """Why ``ctx.skip()`` cannot work there (its error's message), or ``None``."""
    recover: str
    """What ``ctx.recover(value)`` does there, for the docs."""
    async_hooks: str
    """Where async hooks may run, for the docs."""
    refuses_others: bool
    """A hook of a kind that never runs there is refused at registration on any bus
    (else: accepted on a plain bus, since a point of another kind may come by that name;
    reported by ``check_pending()``; refused by a strict bus)."""


_lock = threading.Lock()  # guards the check-then-set of add_*: never held around user code
_EVENTS = ("event", "declared event")  # the rows of events: every other row is a point's
_hook_kinds: Dict[str, HookKind] = {}
_point_kinds: Dict[str, PointKind] = {}
_at_points: Set[str] = set()  # hook kinds that some point kind other than an event's runs

HOOK_KINDS: Mapping[str, HookKind] = _hook_kinds
"""Every hook kind declared so far, by name: the registry's slow path reads it directly (a
miss is refused through :func:`hook_kind`). Read only; declare with :func:`add_hook_kind`."""
AT_POINTS: AbstractSet[str] = _at_points
"""The hook kinds some kind of hook point runs (not an event): :func:`runs_at_points`, for
the registry's slow path. Read only; it grows with :func:`add_point_kind`."""


def _add(table: Dict[str, NamedTuple], row: NamedTuple, what: str) -> None:
    name: str = getattr(row, "name")  # noqa: B009 (both row types have it)
    with _lock:
        existing = table.get(name)
        if existing is None:
            table[name] = row
            return
    if existing != row:
        raise ValueError(
            f"{what} {name!r} is declared already, differently: {existing!r}; a second "
            f"declaration must be the same (as when a module is imported again)"
        )


def add_hook_kind(kind: HookKind) -> HookKind:
    """Declare a hook kind (an adapter's own, such as torch's ``"grad"``); return it.

    Idempotent for an equal row; a different row under a known name is a ``ValueError``.

    Example:
        >>> from hookbus._kinds import add_hook_kind, hook_kind
        >>> pre = hook_kind("pre")
        >>> add_hook_kind(pre) is pre  # declared again, the same: harmless
        True
        >>> add_hook_kind(pre._replace(method="before"))
        Traceback (most recent call last):
        ValueError: hook kind 'pre' is declared already, differently: ...
    """
    if kind.shape not in (PLAIN, GENERATOR):
        raise ValueError(f"unknown hook shape {kind.shape!r}; accepted: {PLAIN!r}, {GENERATOR!r}")
    _add(_hook_kinds, kind, "hook kind")  # type: ignore[arg-type]
    return kind


def add_point_kind(kind: PointKind) -> PointKind:
    """Declare a point kind (an adapter's own, such as torch's ``"module"``); return it.

    Every hook kind it runs must be declared first. Idempotent for an equal row; a
    different row under a known name is a ``ValueError``.

    Example:
        >>> from hookbus._kinds import add_point_kind, point_kind
        >>> add_point_kind(point_kind("method")).runs  # declared again, the same
        ('around', 'pre', 'post', 'exception')
        >>> add_point_kind(point_kind("method")._replace(runs=("tick",)))
        Traceback (most recent call last):
        ValueError: point kind 'method' runs hook kinds that are not declared: 'tick'; ...
    """
    unknown = [name for name in kind.runs if name not in _hook_kinds]
    if unknown:
        raise ValueError(
            f"point kind {kind.name!r} runs hook kinds that are not declared: "
            f"{', '.join(map(repr, unknown))}; declare them first (add_hook_kind)"
        )
    _add(_point_kinds, kind, "point kind")  # type: ignore[arg-type]
    if kind.name not in _EVENTS:
        _at_points.update(kind.runs)
    return kind


def hook_kind(name: str) -> HookKind:
    """The row of the hook kind ``name``; ``ValueError`` naming the accepted kinds.

    Example:
        >>> hook_kind("bogus")
        Traceback (most recent call last):
        ValueError: unknown hook kind 'bogus'; accepted: 'event', 'pre', 'post', 'exception', ...
    """
    try:
        return _hook_kinds[name]
    except (KeyError, TypeError):
        accepted = ", ".join(map(repr, _hook_kinds))
        raise ValueError(f"unknown hook kind {name!r}; accepted: {accepted}") from None


def point_kind(name: str) -> PointKind:
    """The row of the point kind ``name``; ``ValueError`` naming the known kinds."""
    try:
        return _point_kinds[name]
    except (KeyError, TypeError):
        accepted = ", ".join(map(repr, _point_kinds))
        raise ValueError(f"unknown point kind {name!r}; known: {accepted}") from None


def refuses_others(kind: str) -> bool:
    """Whether a point of ``kind`` (a point's ``kind``) refuses, at registration on any bus,
    a hook of a kind that never runs there; ``False`` for a kind the table does not know.

    Example:
        >>> refuses_others("declared event"), refuses_others("function"), refuses_others("?")
        (True, False, False)
    """
    row = _point_kinds.get(kind)
    return row is not None and row.refuses_others


def hook_kinds() -> Tuple[HookKind, ...]:
    """Every hook kind declared so far, the core's first."""
    return tuple(_hook_kinds.values())


def point_kinds() -> Tuple[PointKind, ...]:
    """Every point kind declared so far, the core's first."""
    return tuple(_point_kinds.values())


def methods(kinds: Iterable[str]) -> str:
    """``"on or around"``: the registering methods of ``kinds``, for messages.

    Example:
        >>> methods(("pre", "post", "exception", "around"))
        'pre, post, exception or around'
    """
    names = [_hook_kinds[kind].method if kind in _hook_kinds else kind for kind in kinds]
    if len(names) < 2:
        return "".join(names)
    return f"{', '.join(names[:-1])} or {names[-1]}"


def runs_at_points(kind: str) -> bool:
    """Whether a hook of ``kind`` runs at some kind of hook point (not an event).

    Example:
        >>> runs_at_points("pre"), runs_at_points("event")
        (True, False)
    """
    return kind in _at_points


def where_it_runs(kind: str, events: str = "declared event") -> str:
    """``"hook point"``, ``events`` (the noun for events), or both, for messages about
    where a hook of ``kind`` could run.

    Example:
        >>> where_it_runs("around"), where_it_runs("event", "declared or emitted event")
        ('declared event or hook point', 'declared or emitted event')
    """
    at_events = kind in EVENT_RUNS
    if at_events and kind in _at_points:
        return f"{events} or hook point"
    return events if at_events else "hook point"


# --- the one rule behind a strict bus and check_pending() ---------------------------------


def known_names(
    kind: str,
    events: Iterable[str],
    points: Mapping[str, Iterable[str]],
) -> Set[str]:
    """The names where a hook of ``kind`` runs: ``events`` (declared, and, for
    ``check_pending()``, emitted) if it runs at an event, and each point's name whose
    kinds (``points``: name -> kinds) hold it.

    Example:
        >>> sorted(known_names("around", {"saved"}, {"load": ("around", "pre")}))
        ['load', 'saved']
        >>> sorted(known_names("pre", {"saved"}, {"load": ("around", "pre")}))
        ['load']
    """
    known: Set[str] = set(events) if kind in EVENT_RUNS else set()
    known.update(name for name, kinds in points.items() if kind in kinds)
    return known


def other_namespace(
    kind: str, name: str, events: Iterable[str], points: Mapping[str, Iterable[str]]
) -> str:
    """``"; 'x' is an event: use on or around"`` when ``name`` is a place where ``kind``
    never runs but others do (an event, or a point of other kinds), else ``""``.

    Example:
        >>> other_namespace("pre", "saved", {"saved"}, {})
        "; 'saved' is an event: use on or around"
        >>> other_namespace("event", "load", set(), {"load": ("around", "pre", "post")})
        "; 'load' is a hook point: use pre, post or around"
    """
    if kind not in EVENT_RUNS and name in set(events):
        ordered = [each for each in _hook_kinds if each in EVENT_RUNS]  # the table's order
        return f"; {name!r} is an event: use {methods(ordered)}"
    kinds = points.get(name)
    if kinds is not None and kind not in kinds:
        ordered = [each for each in _hook_kinds if each in kinds]  # the table's order
        return f"; {name!r} is a hook point: use {methods(ordered)}"
    return ""


# --- the docs ------------------------------------------------------------------------------


def render_markdown() -> str:
    """The tables of docs/concepts.md's "What is valid where", from the rows declared now.

    A test renders them with ``hookbus.torch`` imported and compares them with the page.
    """
    kinds = list(_hook_kinds.values())
    lines: List[str] = [
        "| hook kind | registered with | must be | called with | options |",
        "|---|---|---|---|---|",
    ]
    order = ("priority", "once", "target", "weak", "optional", "with_name")
    for kind in kinds:
        shape = "a generator function" if kind.shape == GENERATOR else "not a generator function"
        options = ", ".join(f"`{o}`" for o in order if o in kind.options)
        lines.append(f"| `{kind.name}` | `{kind.method}` | {shape} | {kind.called} | {options} |")
    lines += [
        "",
        "| point kind | " + " | ".join(f"`{kind.name}`" for kind in kinds) + " | a hook kind "
        "that never runs there |",
        "|---|" + "---|" * len(kinds) + "---|",
    ]
    for point in _point_kinds.values():
        cells = ["runs" if kind.name in point.runs else "never" for kind in kinds]
        other = (
            "refused at registration"
            if point.refuses_others
            else "accepted (a point of that name may come), reported by `check_pending()`, "
            "refused by a strict bus"
        )
        lines.append(f"| {point.name} | " + " | ".join(cells) + f" | {other} |")
    lines += [
        "",
        "| point kind | what it is | `target=` matches | `ctx.skip()` | `ctx.recover()` "
        "| async hooks |",
        "|---|---|---|---|---|---|",
    ]
    for point in _point_kinds.values():
        skip = "yes" if point.skip_refusal is None else "refused (`RuntimeError`)"
        lines.append(
            f"| {point.name} | {point.what} | {point.target} | {skip} | {point.recover} "
            f"| {point.async_hooks} |"
        )
    return "\n".join(lines) + "\n"


# --- the core's rows -------------------------------------------------------------------------

_CONTEXT = "`hook(ctx)`, a `CallContext`"
CORE_HOOK_KINDS: Tuple[HookKind, ...] = tuple(
    add_hook_kind(kind)
    for kind in (
        HookKind(
            "event",
            "on",
            PLAIN,
            False,
            _OPTIONS | {"with_name"},
            "what `emit` was given (a declared event's hook may take a subset by name)",
        ),
        HookKind("pre", "pre", PLAIN, True, _OPTIONS, _CONTEXT),
        HookKind("post", "post", PLAIN, True, _OPTIONS, _CONTEXT),
        HookKind("exception", "exception", PLAIN, True, _OPTIONS, _CONTEXT),
        HookKind(
            "around",
            "around",
            GENERATOR,
            True,
            _OPTIONS,
            _CONTEXT + "; it yields once, where the call runs",
        ),
    )
)
"""The hook kinds of the core, in the order messages list them."""

_SENDER = (
    "the sender, the first positional argument (built-in values by value, other objects "
    "by identity)"
)
_AROUND_ONLY = "around hooks only (it swallows an `Exception` at the `yield`)"
_EMIT_ASYNC = "with `emit_async`, `collect_async` and `gather`"
_POINT_ASYNC = "on an `async def` point (sync or async hooks)"
_POINT_HOOKS = ("around", "pre", "post", "exception")

EVENT = add_point_kind(
    PointKind(
        "event",
        ("event", "around"),
        "a name given to `emit` (not declared)",
        _SENDER,
        None,
        _AROUND_ONLY,
        _EMIT_ASYNC,
        False,
    )
)
"""An emitted name that no declaration gives a spec."""

DECLARED_EVENT = add_point_kind(
    PointKind(
        "declared event",
        EVENT.runs,
        "a name declared with `@bus.event`: hooks are checked against its spec",
        "the sender, the spec's first parameter, passed by position or by keyword "
        "(built-in values by value, other objects by identity)",
        None,
        _AROUND_ONLY,
        _EMIT_ASYNC + " (not on a historic event: replays are synchronous)",
        True,
    )
)
"""A declared name: an event, so a hook of a kind that never runs at one is refused."""

EVENT_RUNS: FrozenSet[str] = frozenset(EVENT.runs) | frozenset(DECLARED_EVENT.runs)
"""The hook kinds an event's dispatch runs (registry plans and checks read it)."""

add_point_kind(
    PointKind(
        "function",
        _POINT_HOOKS,
        "a callable made a hook point (`@bus.hookable`, `bus.wrap`)",
        "the callable (a bound method's object)",
        None,
        "yes: the post hooks then run on the value",
        _POINT_ASYNC,
        False,
    )
)
add_point_kind(
    PointKind(
        "method",
        _POINT_HOOKS,
        "a method made a hook point in its class body",
        "the instance (the class, for a classmethod)",
        None,
        "yes: the post hooks then run on the value",
        _POINT_ASYNC,
        False,
    )
)
