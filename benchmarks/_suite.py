"""The benchmark cases of rows 1-4, tracing, declared events and the fast copies, and the
table lines that read them.

Each table line names its case and its floor (both timed in the same rounds), its
target, and how to judge it. Keys are ``"group/case"`` strings.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import _peers
from _harness import Case, Stat, absolute, ratio

import hookbus

TABLE_COUNTS = (0, 1, 10)


class Line:
    """One line of the results table."""

    def __init__(
        self,
        row: str,
        label: str,
        key: str,
        floor: Optional[str],
        target: str = "",
        judge: Optional[Callable[[Results], Optional[bool]]] = None,
        stat: Optional[Callable[[Results], Stat]] = None,
    ) -> None:
        self.row = row
        self.label = label
        self.key = key
        self.floor = floor
        self.target = target
        self.judge = judge
        self.stat = stat  # the ratio, when it isn't the per-round ratio of key to floor


class Results:
    """The timed cases by key, with helpers to read ratios and times."""

    def __init__(self, cases: Sequence[Case]) -> None:
        self.cases = {case.key: case for case in cases}
        self.values: Dict[str, float] = {}  # non-timed results (memory), by key

    def has(self, *keys: str) -> bool:
        return all(key in self.cases for key in keys)

    def ratio(self, key: str, floor: str) -> Stat:
        return ratio(self.cases[key], self.cases[floor])

    def ns(self, key: str) -> Stat:
        return absolute(self.cases[key])


def _at_most(key: str, floor: str, limit: float) -> Callable[[Results], Optional[bool]]:
    return lambda results: results.ratio(key, floor).median <= limit


def _hookbus_beats(peer_key: str, n: int) -> Callable[[Results], Optional[bool]]:
    # Both against the same floor, round by round: hookbus / peer < 1.
    return lambda results: results.ratio(f"emit{n}/hookbus", peer_key).median < 1.0


def _hookbus_at_or_below(peer_key: str, n: int) -> Callable[[Results], Optional[bool]]:
    return lambda results: results.ratio(f"emit{n}/hookbus", peer_key).median <= 1.0


def floor_dispatcher(hooks: Sequence[Callable[..., Any]]) -> Callable[..., None]:
    """The least any generic dispatcher does: call each hook of a tuple."""
    hooks = tuple(hooks)

    def dispatch(*args: Any) -> None:
        for f in hooks:
            f(*args)

    return dispatch


def emit_cases(counts: Sequence[int], peers: Sequence[str]) -> List[Case]:
    """Row 1 (and the plot): emit with n no-op hooks, hookbus, the floor and each peer."""
    cases: List[Case] = []
    for n in counts:
        cases.append(
            Case(
                f"emit{n}/floor",
                "dispatch(1)",
                {"dispatch": floor_dispatcher(_peers.listeners(n))},
            )
        )
        bus = hookbus.EventBus()
        for listener in _peers.listeners(n):
            bus.on("e", listener)
        cases.append(Case(f"emit{n}/hookbus", "bus.emit('e', 1)", {"bus": bus}))
        for peer in peers:
            statements, ns = _peers.EMITTERS[peer](n)
            for entry, stmt in statements.items():
                cases.append(Case(f"emit{n}/{peer} {entry}", stmt, ns))
    return cases


def emit_lines(peers: Sequence[str], case_keys: Sequence[str]) -> List[Line]:
    lines: List[Line] = []
    limits = {0: 1.5, 1: 1.5, 10: 1.3}
    for n in TABLE_COUNTS:
        row = f"1. emit, {n} hook{'s' if n != 1 else ''}"
        lines.append(
            Line(row, "floor: `for f in hooks: f(*args)`", f"emit{n}/floor", f"emit{n}/floor")
        )
        lines.append(
            Line(
                row,
                "**hookbus** `bus.emit`",
                f"emit{n}/hookbus",
                f"emit{n}/floor",
                f"<= {limits[n]}x floor",
                _at_most(f"emit{n}/hookbus", f"emit{n}/floor", limits[n]),
            )
        )
        for key in case_keys:
            group, _, label = key.partition("/")
            if group != f"emit{n}" or label in ("floor", "hookbus"):
                continue
            fast = label.endswith("emit_fast")
            if fast and n == 0:
                target, judge = "", None  # emit_fast's target is at 1 and 10 hooks
            elif fast:
                target, judge = "hookbus at or below", _hookbus_at_or_below(key, n)
            else:
                target, judge = "hookbus faster", _hookbus_beats(key, n)
            lines.append(Line(row, label, key, f"emit{n}/floor", target, judge))
    return lines


def register_cases(peers: Sequence[str]) -> List[Case]:
    """Row 2: register and remove one hook."""
    (listener,) = _peers.listeners(1)
    items: List[Any] = []
    cases = [
        Case(
            "register/floor",
            "items.append(listener); items.remove(listener)",
            {"items": items, "listener": listener},
        ),
        Case(
            "register/hookbus",
            "bus.on('e', listener).remove()",
            {"bus": hookbus.EventBus(), "listener": listener},
        ),
    ]
    for peer in peers:
        stmt, ns = _peers.REGISTERS[peer]()
        cases.append(Case(f"register/{peer}", stmt, ns))
    return cases


def register_lines(peers: Sequence[str]) -> List[Line]:
    row = "2. register + remove"
    lines = [
        Line(row, "floor: `list.append` + `list.remove`", "register/floor", "register/floor"),
        Line(
            row,
            "**hookbus** `bus.on(...)` + `handle.remove()`",
            "register/hookbus",
            "register/floor",
            "<= 25x floor",
            _at_most("register/hookbus", "register/floor", 25.0),
        ),
    ]
    names = {
        "blinker": "connect + disconnect",
        "psygnal": "connect + disconnect",
        "pyee": "on + remove_listener",
        "pluggy": "register + unregister",
    }
    for peer in peers:
        lines.append(Line(row, f"{peer} {names[peer]}", f"register/{peer}", "register/floor"))
    return lines


def _target(x: Any) -> Any:
    return x


def churn_cases() -> List[Case]:
    """A hook point whose plan changes at every call: a pre hook added, the call, removed."""
    bus = hookbus.EventBus()
    fn = bus.wrap(_target, "churn")
    bus.post("churn", _noop_hook)  # so that the point stays hooked between the calls
    return [
        Case(
            "churn/hookbus",
            "handle = bus.pre('churn', hook); fn(1); handle.remove()",
            {"bus": bus, "fn": fn, "hook": _noop_hook},
        ),
        Case(
            "churn/floor",
            "items.append(hook); fn(1); items.remove(hook)",
            {"items": [], "hook": _noop_hook, "fn": _target},
        ),
    ]


def churn_lines() -> List[Line]:
    row = "plan changed per call"
    return [
        Line(
            row,
            "floor: `list.append` + the bare call + `list.remove`",
            "churn/floor",
            "churn/floor",
        ),
        Line(
            row,
            "**hookbus** hook point: `bus.pre(...)`, the call, `remove()`",
            "churn/hookbus",
            "churn/floor",
            # The goal of register + remove (row 2), as the issue asks of a plan that
            # changes at every call.
            "<= 25x floor",
            _at_most("churn/hookbus", "churn/floor", 25.0),
        ),
    ]


def _noop_hook(ctx: Any) -> None:
    return None


def passthrough(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The least a decorator does: a ``functools.wraps`` pass-through."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


class HandContext:
    """The context of the hand-written decorator: arguments in, result out."""

    __slots__ = ("args", "kwargs", "result")

    def __init__(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        self.args = args
        self.kwargs = kwargs
        self.result: Any = None


def hand_written(
    fn: Callable[..., Any], pre: Callable[[Any], None], post: Callable[[Any], None]
) -> Callable[..., Any]:
    """What a user writes by hand for one pre and one post hook: the floor of row 3."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = HandContext(args, kwargs)
        pre(ctx)
        ctx.result = fn(*ctx.args, **ctx.kwargs)
        post(ctx)
        return ctx.result

    return wrapper


class LeanContext:
    """The lean floor's context: ``__slots__`` and no ``__init__`` (the wrapper fills it)."""

    __slots__ = ("args", "kwargs", "result")


def lean_hand_written(
    fn: Callable[..., Any], pre: Callable[[Any], None], post: Callable[[Any], None]
) -> Callable[..., Any]:
    """The leanest decorator a user writes for one pre and one post hook that still lets
    the hooks see and replace the arguments and the result: no ``__init__`` frame, the
    context's fields stored in the wrapper. The floor that the hooked-call goals name."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = LeanContext()
        ctx.args = args
        ctx.kwargs = kwargs
        pre(ctx)
        ctx.result = fn(*ctx.args, **ctx.kwargs)
        post(ctx)
        return ctx.result

    return wrapper


def _noop_around(ctx: Any) -> Any:
    yield


def hand_written_around(
    fn: Callable[..., Any], around: Callable[[Any], Any]
) -> Callable[..., Any]:
    """A decorator running a contextmanager-style generator around the call, by hand:
    the floor of the around-hook line (set-up, the call, teardown; errors thrown in)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = HandContext(args, kwargs)
        gen = around(ctx)
        next(gen)
        try:
            ctx.result = fn(*ctx.args, **ctx.kwargs)
        except Exception as error:
            gen.throw(error)
            raise
        try:
            next(gen)
        except StopIteration:
            return ctx.result
        raise RuntimeError("the generator yielded twice")

    return wrapper


def lean_hand_written_around(
    fn: Callable[..., Any], around: Callable[[Any], Any]
) -> Callable[..., Any]:
    """:func:`hand_written_around` with the lean floor's context (:class:`LeanContext`)."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = LeanContext()
        ctx.args = args
        ctx.kwargs = kwargs
        gen = around(ctx)
        next(gen)
        try:
            ctx.result = fn(*ctx.args, **ctx.kwargs)
        except Exception as error:
            gen.throw(error)
            raise
        try:
            next(gen)
        except StopIteration:
            return ctx.result
        raise RuntimeError("the generator yielded twice")

    return wrapper


def call_cases() -> List[Case]:
    """Row 3: a call through a hook point, and what a user would write by hand."""
    bus = hookbus.EventBus()
    plain = bus.wrap(_target, "call.plain")
    hooked = bus.wrap(_target, "call.hooked")
    bus.pre("call.hooked", _noop_hook)
    bus.post("call.hooked", _noop_hook)
    around = bus.wrap(_target, "call.around")
    bus.around("call.around", _noop_around)
    return [
        Case("call/hand around", "fn(1)", {"fn": hand_written_around(_target, _noop_around)}),
        Case(
            "call/lean around",
            "fn(1)",
            {"fn": lean_hand_written_around(_target, _noop_around)},
        ),
        Case("call/lean", "fn(1)", {"fn": lean_hand_written(_target, _noop_hook, _noop_hook)}),
        Case("call/hookbus around", "fn(1)", {"fn": around}),
        Case("call/bare", "fn(1)", {"fn": _target}),
        Case("call/wraps", "fn(1)", {"fn": passthrough(_target)}),
        Case("call/hand", "fn(1)", {"fn": hand_written(_target, _noop_hook, _noop_hook)}),
        Case("call/hookbus", "fn(1)", {"fn": plain}),
        Case("call/hookbus hooked", "fn(1)", {"fn": hooked}),
    ]


def call_lines() -> List[Line]:
    row = "3. wrapped call"
    return [
        Line(row, "bare function", "call/bare", "call/wraps"),
        Line(row, "floor: `functools.wraps` pass-through", "call/wraps", "call/wraps"),
        Line(
            row,
            "**hookbus** hook point, no hooks",
            "call/hookbus",
            "call/wraps",
            "<= 1.15x floor",
            _at_most("call/hookbus", "call/wraps", 1.15),
        ),
        Line(
            row,
            "floor: hand-written decorator (`__slots__` context, pre fn, call, post fn)",
            "call/hand",
            "call/hand",
        ),
        Line(
            row,
            "**hookbus** hook point, 1 pre + 1 post hook",
            "call/hookbus hooked",
            "call/hand",
            "<= 2.0x hand-written",
            _at_most("call/hookbus hooked", "call/hand", 2.0),
        ),
        Line(
            row,
            "floor, lean: hand-written decorator (`__slots__` context filled inline)",
            "call/lean",
            "call/lean",
        ),
        Line(
            row,
            "**hookbus** hook point, 1 pre + 1 post hook, against the lean floor",
            "call/hookbus hooked",
            "call/lean",
            "<= 1.5x lean",
            _at_most("call/hookbus hooked", "call/lean", 1.5),
        ),
        Line(
            row,
            "floor: hand-written decorator running a generator around the call",
            "call/hand around",
            "call/hand around",
        ),
        Line(
            row,
            "**hookbus** hook point, 1 around hook",
            "call/hookbus around",
            "call/hand around",
            "<= 2.0x hand-written",
            _at_most("call/hookbus around", "call/hand around", 2.0),
        ),
        Line(
            row,
            "floor, lean: the generator around the call, lean context",
            "call/lean around",
            "call/lean around",
        ),
        Line(
            row,
            "**hookbus** hook point, 1 around hook, against the lean floor",
            "call/hookbus around",
            "call/lean around",
            "<= 1.5x lean",
            _at_most("call/hookbus around", "call/lean around", 1.5),
        ),
        Line(
            row,
            "**hookbus** hook point, 1 pre + 1 post hook, against the pass-through",
            "call/hookbus hooked",
            "call/wraps",
        ),
    ]


SCALE_EVENTS = (1, 100, 10_000)
SCALE_PATTERNS = (0, 10, 100)


def scale_cases() -> List[Case]:
    """Row 4: emit (1 hook) with many other events, or non-matching patterns, registered."""
    cases: List[Case] = []
    (listener,) = _peers.listeners(1)
    for others in SCALE_EVENTS:
        bus = hookbus.EventBus()
        for i in range(others):
            bus.on(f"other.{i}", listener)
        bus.on("e", listener)
        cases.append(Case(f"scale/events {others}", "bus.emit('e', 1)", {"bus": bus}))
    for patterns in SCALE_PATTERNS:
        bus = hookbus.EventBus()
        for i in range(patterns):
            bus.on(f"other{i}.*", listener)
        bus.on("e", listener)
        cases.append(Case(f"scale/patterns {patterns}", "bus.emit('e', 1)", {"bus": bus}))
    return cases


def scale_lines() -> List[Line]:
    row = "4. scale (emit, 1 hook)"
    lines: List[Line] = []
    base = f"scale/events {SCALE_EVENTS[0]}"
    for others in SCALE_EVENTS:
        key = f"scale/events {others}"
        target, judge = ("", None) if key == base else ("<= 1.10x", _at_most(key, base, 1.10))
        lines.append(Line(row, f"{others:,} other events registered", key, base, target, judge))
    base = f"scale/patterns {SCALE_PATTERNS[0]}"
    for patterns in SCALE_PATTERNS:
        key = f"scale/patterns {patterns}"
        target, judge = ("", None) if key == base else ("<= 1.10x", _at_most(key, base, 1.10))
        lines.append(Line(row, f"{patterns} non-matching patterns", key, base, target, judge))
    return lines


def trace_cases() -> List[Case]:
    """Tracing off costs nothing: emit on a bus never traced vs one traced, then closed."""
    (listener,) = _peers.listeners(1)
    never, after = hookbus.EventBus(), hookbus.EventBus()
    never.on("e", listener)
    after.on("e", listener)
    with after.trace():
        after.emit("e", 1)
    return [
        Case("trace/never", "bus.emit('e', 1)", {"bus": never}),
        Case("trace/after", "bus.emit('e', 1)", {"bus": after}),
    ]


def trace_lines() -> List[Line]:
    row = "tracing off (emit, 1 hook)"
    return [
        Line(row, "bus never traced", "trace/never", "trace/never"),
        Line(
            row,
            "after `with bus.trace():` closed",
            "trace/after",
            "trace/never",
            "<= 1.05x (noise)",
            _at_most("trace/after", "trace/never", 1.05),
        ),
    ]


def declared_cases() -> List[Case]:
    """Declared events: emit checks the arguments against the spec, 1 hook."""
    (listener,) = _peers.listeners(1)
    plain, declared = hookbus.EventBus(), hookbus.EventBus()
    plain.on("e", listener)

    @declared.event("e")
    def spec(x: Any) -> None: ...

    declared.on("e", listener)  # listener(x): the spec's own shape
    other = hookbus.EventBus()

    @other.event("e")
    def other_spec(x: Any) -> None: ...

    def variadic(*args: Any, **kwargs: Any) -> None:
        return None

    other.on("e", variadic)  # another shape: the binder checks first
    plain_other = hookbus.EventBus()
    plain_other.on("e", variadic)
    subset = hookbus.EventBus()

    @subset.event("e")
    def grown_spec(x: Any, tag: str = "") -> None: ...

    subset.on("e", listener)  # listener(x): a subset of the spec, taken by name
    return [
        Case("declared/undeclared", "bus.emit('e', 1)", {"bus": plain}),
        Case("declared/undeclared other", "bus.emit('e', 1)", {"bus": plain_other}),
        Case("declared/emit", "bus.emit('e', 1)", {"bus": declared}),
        Case("declared/other shape", "bus.emit('e', 1)", {"bus": other}),
        Case("declared/event.emit", "event.emit(1)", {"event": spec}),
        Case("declared/subset", "bus.emit('e', 1)", {"bus": subset}),
    ]


def declared_lines() -> List[Line]:
    row = "declared events (emit, 1 hook)"
    return [
        Line(row, "undeclared `bus.emit`", "declared/undeclared", "declared/undeclared"),
        Line(
            row,
            "declared, hook of the spec's shape: `bus.emit`",
            "declared/emit",
            "declared/undeclared",
            "<= 1.20x",
            _at_most("declared/emit", "declared/undeclared", 1.20),
        ),
        Line(
            row,
            "undeclared `bus.emit`, hook `(*args, **kwargs)`",
            "declared/undeclared other",
            "declared/undeclared other",
        ),
        Line(
            row,
            "declared, hook `(*args, **kwargs)`: `bus.emit`",
            "declared/other shape",
            "declared/undeclared other",
            "<= 1.20x",
            _at_most("declared/other shape", "declared/undeclared other", 1.20),
        ),
        Line(
            row,
            "declared, hook of the spec's shape: `event.emit`",
            "declared/event.emit",
            "declared/undeclared",
            "<= 1.20x",
            _at_most("declared/event.emit", "declared/undeclared", 1.20),
        ),
        Line(
            row,
            "declared `(x, tag='')`, hook `(x)` taken by name: `bus.emit`",
            "declared/subset",
            "declared/undeclared",
            "<= 1.30x",
            _at_most("declared/subset", "declared/undeclared", 1.30),
        ),
    ]


# --- every fast copy against its slow twin (``hookbus/_dispatch.py``'s map) --------------


class _NoScope:
    """A scope that takes nothing: passing it sends ``register`` to its checked path."""

    registry = None

    def add(self, handle: Any) -> None:
        pass


def copy_cases() -> List[Case]:
    """Each copy made for speed, and the same work done by its slow twin."""
    from hookbus._handle import Handle
    from hookbus._sync_dispatch import dispatch_event

    (listener,) = _peers.listeners(1)
    emitting = hookbus.EventBus()
    emitting.on("e", listener)
    emitting.emit("e", 1)
    handles = tuple(emitting.registry.event_handles("e"))

    bus = hookbus.EventBus()
    direct = bus.wrap(_target, "copy.direct")
    general = bus.wrap(_target, "copy.general")
    for name in ("copy.direct", "copy.general"):
        bus.pre(name, _noop_hook)
        bus.post(name, _noop_hook)
    direct(1), general(1)  # plans worked out: the one of copy.general then runs the twin
    point: Any = general.__hookbus_point__  # type: ignore[attr-defined]
    if hasattr(type(point.plan), "run"):  # a compiled call: its plan runs the reference
        point.plan.run = type(point)._run_reference
    else:  # an older hookbus, with the hand-written direct loop
        point.plan.direct = False

    registry = hookbus.EventBus().registry
    registry.unregister(registry.register("event", "e", listener, {}))
    args, kwargs = (1,), {"k": 2}

    declaring = hookbus.EventBus()

    @declaring.event("e")
    def event(x: Any) -> None: ...

    declaring.on("e", listener)

    class PartialEmitEvent(hookbus.Event):  # type: ignore[type-arg]
        """The same event without the copy: bus.emit's partial as an instance value (a
        class of its own: an ``emit`` key in the instances of Event would keep CPython
        from specializing ``event.emit`` on every Event)."""

    partial = PartialEmitEvent(declaring, "e", event.__wrapped__, event.signature)
    partial.__dict__["emit"] = functools.partial(type(declaring).emit, declaring, "e")
    event.emit(1)
    return [
        Case("copies/event emit", "event.emit(1)", {"event": event}),
        Case("copies/event emit twin", "event.emit(1)", {"event": partial}),
        Case("copies/emit", "bus.emit('e', 1)", {"bus": emitting}),
        Case(
            "copies/emit twin",
            "dispatch(registry, 'e', handles, (1,), {}, None)",
            {"dispatch": dispatch_event, "registry": emitting.registry, "handles": handles},
        ),
        Case("copies/direct", "fn(1)", {"fn": direct}),
        Case("copies/direct twin", "fn(1)", {"fn": general}),
        Case(
            "copies/register",
            "r.unregister(r.register('event', 'e', f, o))",
            {"r": registry, "f": listener, "o": {}},
        ),
        Case(
            "copies/register twin",
            "r.unregister(r.register('event', 'e', f, o, scope=s))",
            {"r": registry, "f": listener, "o": {}, "s": _NoScope()},
        ),
        Case(
            "copies/unregister twin",
            "r.remove([r.register('event', 'e', f, o)])",
            {"r": registry, "f": listener, "o": {}},
        ),
        Case(
            "copies/handle",
            "plain(r, 'event', 'e', f)",
            {"plain": Handle.plain, "r": registry, "f": listener},
        ),
        Case(
            "copies/handle twin",
            "new(r, 'event', 'e', f, 0, 0, False, None, False, False, None)",
            {"new": Handle, "r": registry, "f": listener},
        ),
        Case(
            "copies/context",
            "new('p', None, a, k, 0, 'pre', None)",
            {"new": hookbus.CallContext.for_call, "a": args, "k": kwargs},
        ),
        Case(
            "copies/context twin",
            "new('p', None, a, k, 0, 'pre', None)",
            {"new": hookbus.CallContext, "a": args, "k": kwargs},
        ),
    ]


def copy_lines() -> List[Line]:
    row = "fast copies (each against its slow twin)"
    pays = "<= 0.95x twin"  # a gain inside the noise (5%) does not pay for a copy
    pairs = [
        ("`EventBus.emit`'s inline loop, 1 hook", "copies/emit", "dispatch_event"),
        ("`Event.emit`, emit's loop with the name bound", "copies/event emit", "partial of emit"),
        ("hook point's compiled call, 1 pre + 1 post hook", "copies/direct", "call_with_hooks"),
        ("`Registry.register`'s flat path (+ unregister)", "copies/register", "_register_checked"),
        ("`Registry.unregister`'s inline drop (+ register)", "copies/register", "_drop_locked"),
        ("`Handle.plain`", "copies/handle", "`Handle(...)`"),
        ("`CallContext.for_call`", "copies/context", "`CallContext(...)`"),
    ]
    twins = {
        "copies/emit": "copies/emit twin",
        "copies/event emit": "copies/event emit twin",
        "copies/direct": "copies/direct twin",
        "copies/handle": "copies/handle twin",
        "copies/context": "copies/context twin",
    }
    lines: List[Line] = []
    for label, key, twin_name in pairs:
        if twin_name == "_register_checked":
            twin = "copies/register twin"
        elif twin_name == "_drop_locked":
            twin = "copies/unregister twin"
        else:
            twin = twins[key]
        lines.append(Line(row, f"twin: {twin_name}", twin, twin))
        lines.append(Line(row, label, key, twin, pays, _at_most(key, twin, 0.95)))
    return lines
