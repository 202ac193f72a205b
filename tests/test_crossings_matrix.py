"""The crossings matrix: every hook kind and option, on every point kind, against one model.

Hypothesis draws a *scenario*:

- a point kind, made and called by its :class:`Driver` (an event, a declared event, a
  function point sync or async, a method point; the torch rows add their own drivers);
- a plain or strict bus, and its error policy (``raise``, ``collect``, ``log``);
- a stack of one to five hooks of any kind (event, around, pre, post, exception) with
  options (``once``, ``weak``, ``target``, ``priority``, ``with_name``, a name given as a
  string, an Enum member or a pattern, an event hook taking the spec's arguments by name),
  and what each does when it runs (nothing; return ``None``; raise; raise
  ``KeyboardInterrupt``; ``ctx.skip()``; recover; recover and then raise; raise in an
  around hook's set-up or teardown);
- what the call itself does (return, raise, raise ``KeyboardInterrupt``);
- how an event is dispatched (``emit``, ``collect``, ``first``, ``emit_async``,
  ``collect_async``, ``gather``);
- a lifecycle event around the call: none; a trace open over it; every hook removed by
  the first hook that runs; the name paused; a thread registering a hook while the first
  hook runs; the call inside ``isolate()``, with a hook registered in the block.

It registers the hooks, dispatches twice, and checks the bus. The invariants:

1. registration accepts a hook exactly when the table says (``hookbus._kinds``: the kinds
   a declared event runs, the options each kind takes; a strict bus takes only the kinds
   that run at the name);
2. the hooks that run, in order, and what the call returns or raises, are those of
   :class:`Model`, the documented dispatch rules written plainly with the matrix's own
   table (:data:`RUNS`, checked equal to the library's); an error raised by a hook carries
   a note naming it (each error of a ``collect`` group too), and ``log`` logs exactly the
   errors of the hooks that raised;
3. every started around hook finishes exactly once, innermost first;
4. a ``once`` hook runs at most once, a removed hook never runs again, a hook registered
   during a dispatch first runs at the next one, and ``isolate()`` brings back what it
   took away;
5. a trace records every hook that ran;
6. ``check_pending()`` reports exactly the hooks whose kind never runs where they are,
   as the table says;
7. once the handles are removed, nothing keeps a hook or a call's argument alive.

``test_crossings_hold_everywhere`` draws scenarios; ``test_crossings_that_once_broke_hold``
runs, every time, one pinned scenario for each crossing that was once broken.
``test_crossings_hold_on_compiled_calls`` draws the scenarios whose calls run as compiled
code (``hookbus._compiled_call``: plain around, pre, post and exception hooks on a sync
point, errors raised, no trace), which the options drawn above rarely leave, and checks that
they did.

Profiles (the environment variable ``HOOKBUS_HYPOTHESIS_PROFILE``, as for the state
machine; CI runs ``ci``): ``dev`` runs 200 examples of the green test, ``ci`` 1,000; the
pinned scenarios run once each. Measured on the shared 2-core box at a load of 10
(``python -m pytest -q -p no:cacheprovider tests/test_crossings_matrix.py``, pytest
start-up included): ``dev`` 3.1 s of CPU (20 s wall), ``ci`` 6.9 s of CPU (41 s wall); no
full garbage collection runs unless a check needs one.
The torch point kinds (a module, an operation point, ``every_module``) are rows too, in
``tests/torch_adapter/test_crossings_matrix_torch.py``: each is a :class:`Driver` added with
:func:`add_driver`, whose attributes state where the docs give its kind a rule of its own
(a recovery that warns, a refused skip, phases that read their hooks when they run, what a
``KeyboardInterrupt`` leaves to the point's next call); the model is the same. Every
dispatch's warnings are compared with the model's too (a core dispatch never warns).
"""

from __future__ import annotations

import asyncio
import enum
import gc
import logging
import os
import threading
import warnings
import weakref
from typing import (
    Any,
    Callable,
    ClassVar,
    Dict,
    FrozenSet,
    Generator,
    List,
    NamedTuple,
    Optional,
    Tuple,
    Union,
)
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hookbus import CallContext, EventBus, Handle, HookError, Trace, UnknownNameError, _hookpoint
from hookbus._kinds import hook_kind, point_kind
from hookbus.pytest_plugin import isolate

settings.register_profile(
    "crossings-dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "crossings-ci",
    max_examples=1000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
PROFILE = "crossings-" + os.environ.get("HOOKBUS_HYPOTHESIS_PROFILE", "dev")

NAME = "job"


class Topic(enum.Enum):
    JOB = NAME


NAMES: Dict[str, Any] = {"plain": NAME, "enum": Topic.JOB, "pattern": "jo?"}

# --- the matrix's own table: what runs where, as the docs promise -----------------------

HOOK_KINDS = ("event", "around", "pre", "post", "exception")

RUNS: Dict[str, FrozenSet[str]] = {
    "event": frozenset({"event", "around"}),
    "declared_event": frozenset({"event", "around"}),
    "function": frozenset({"around", "pre", "post", "exception"}),
    "async_function": frozenset({"around", "pre", "post", "exception"}),
    "method": frozenset({"around", "pre", "post", "exception"}),
}
"""Which hook kinds a dispatch of each point kind runs: the model's, written from the docs
(a model that read the library's table could not find the table's mistakes)."""

BEHAVIOURS: Dict[str, Tuple[str, ...]] = {
    "event": ("ok", "none", "raise", "interrupt"),
    "pre": ("ok", "raise", "skip", "interrupt"),
    "post": ("ok", "raise", "interrupt"),
    "exception": ("ok", "raise", "recover", "recover_then_raise"),
    "around": ("ok", "setup_raise", "teardown_raise"),
}
POLICIES = ("raise", "collect", "log")
LIFECYCLES = ("none", "trace", "remove_during", "pause", "thread_registers", "isolate")
EVENT_DISPATCHES = ("emit", "collect", "first", "emit_async", "collect_async", "gather")

# --- drivers: how each point kind is made and called ----------------------------------------


class Driver:
    """One row of the matrix: how to make its point, call it, and what ``target=`` matches.

    ``row`` names the point kind in the library's table; ``is_event`` says which half of
    the model runs (an emission, or a call with pre, post and exception hooks). The
    torch rows are drivers too: a module, an operation point, ``every_module``.
    """

    name = ""
    row = ""
    is_event = False
    is_async = False
    names: ClassVar[Dict[str, Any]] = NAMES
    """The point's name in each form a hook may be registered with (keys of NAMES)."""
    vias: Tuple[str, ...] = ("bus",)
    """How hooks may be registered: ``"bus"`` (``bus.pre(name, ...)``), or a driver's own
    way (an attachment's ``net.pre``, ``every_module``'s ``every.pre``)."""
    # The documented rules where a row differs from the core's (docs/concepts.md):
    recovers = True
    """An exception hook's ``ctx.recover()`` (and an around hook's teardown) can change the
    outcome of an error of the call or of a pre hook; else it warns and the error goes on."""
    skips = True
    """``ctx.skip(value)`` works in a pre hook; else it raises ``RuntimeError``."""
    phase_reads = False
    """Each phase reads the point's hooks when it runs, not when the call began."""
    interrupt_keeps_argument = False
    """A ``KeyboardInterrupt`` raised by the call leaves something of the point's holding
    the call's argument until the point's next call (a documented limit)."""
    interrupt_closes_late = False
    """A ``KeyboardInterrupt`` raised by the call reaches no hook of the point: the around
    hooks it started are closed at the point's next call (a documented limit)."""

    def make(self, bench: Bench) -> Tuple[Callable[[Any], Any], Any]:
        """Make the point on ``bench.bus``; return how to call it with one argument, and
        the object ``target=`` matches."""
        raise NotImplementedError

    def register(
        self, bench: Bench, spec: HookSpec, hook: Callable[..., Any], options: Dict[str, Any]
    ) -> Handle:
        """Register ``hook`` as ``spec`` says (``spec.via``); raise what registration raises."""
        methods = {
            "event": bench.bus.on,
            "around": bench.bus.around,
            "pre": bench.bus.pre,
            "post": bench.bus.post,
            "exception": bench.bus.exception,
        }
        return methods[spec.kind](self.names[spec.name_form], hook, **options)

    def settle(self, bench: Bench) -> None:
        """Call the point once more, with no hook left: on the rows with a limit above, what
        an interrupted call left is let go of then."""


def _body(bench: Bench) -> Callable[[Any, Any], Any]:
    outcome = bench.scenario.call

    def body(sender: Any, value: Any) -> Any:
        if outcome == "raise":
            raise Boom(CALL)
        if outcome == "interrupt":
            raise Interrupt(CALL)
        return RESULT

    return body


class EventDriver(Driver):
    name = row = "event"
    is_event = True

    def make(self, bench: Bench) -> Tuple[Callable[[Any], Any], Any]:
        sender = object()
        return bench.emitter(sender), sender


class DeclaredEventDriver(EventDriver):
    name, row = "declared_event", "declared event"

    def make(self, bench: Bench) -> Tuple[Callable[[Any], Any], Any]:
        @bench.bus.event(NAME)
        def declared(sender: Any, value: Any) -> None: ...

        return super().make(bench)


class FunctionDriver(Driver):
    name = row = "function"

    def make(self, bench: Bench) -> Tuple[Callable[[Any], Any], Any]:
        body = _body(bench)
        point = bench.bus.hookable(NAME)(body)
        return lambda value: point(None, value), body


class AsyncFunctionDriver(Driver):
    name, row, is_async = "async_function", "function", True

    def make(self, bench: Bench) -> Tuple[Callable[[Any], Any], Any]:
        body = _body(bench)

        async def async_body(sender: Any, value: Any) -> Any:
            return body(sender, value)

        point = bench.bus.hookable(NAME)(async_body)
        return lambda value: asyncio.run(point(None, value)), async_body


class MethodDriver(Driver):
    name = row = "method"

    def make(self, bench: Bench) -> Tuple[Callable[[Any], Any], Any]:
        body = _body(bench)

        class Owner:
            @bench.bus.hookable(NAME)
            def job(self, value: Any) -> Any:
                return body(self, value)

        owner = Owner()
        return lambda value: owner.job(value), owner


DRIVERS: Dict[str, Driver] = {
    driver.name: driver
    for driver in (
        EventDriver(),
        DeclaredEventDriver(),
        FunctionDriver(),
        AsyncFunctionDriver(),
        MethodDriver(),
    )
}


ROWS: Dict[str, Driver] = dict(DRIVERS)
"""Every driver by name: the core's, and those other matrix files add (:func:`add_driver`).
The core's test draws from :data:`DRIVERS` only."""


def add_driver(driver: Driver, runs: FrozenSet[str]) -> Driver:
    """Add a row to the matrix: ``driver``, and the hook kinds its dispatch runs, written
    from the docs (the model's own table)."""
    ROWS[driver.name] = driver
    RUNS[driver.name] = runs
    return driver


def test_the_library_s_table_runs_what_the_matrix_expects() -> None:
    """The matrix models dispatch with its own table; registration and ``check_pending()``
    read the library's. Both must be the one the docs state."""
    for name, driver in DRIVERS.items():
        assert set(point_kind(driver.row).runs) == RUNS[name], name
    assert set(RUNS["declared_event"]) == set(point_kind("declared event").runs)


# --- scenarios ---------------------------------------------------------------------------


class HookSpec(NamedTuple):
    """One registration, and what the hook does when it runs."""

    kind: str
    behaviour: str
    priority: int
    once: bool
    weak: bool
    target: str  # "none", "match" (the sender or call target) or "other"
    with_name: bool
    name_form: str  # a key of NAMES
    by_name: bool  # an event hook that takes only the spec's ``value``, by name
    via: str = "bus"  # one of the driver's vias


class Scenario(NamedTuple):
    point_kind: str  # a key of DRIVERS
    strict: bool
    errors: str  # the bus's error policy
    hooks: Tuple[HookSpec, ...]
    call: str  # what the call does: "ok", "raise" or "interrupt"
    dispatch: str  # for events: one of EVENT_DISPATCHES; else "call"
    lifecycle: str  # one of LIFECYCLES (or a row's own: "remove_from_thread")


@st.composite
def hook_specs(draw: Any, vias: Tuple[str, ...] = ("bus",)) -> HookSpec:
    kind = draw(st.sampled_from(HOOK_KINDS))
    return HookSpec(
        kind=kind,
        behaviour=draw(st.sampled_from(BEHAVIOURS[kind])),
        priority=draw(st.integers(-1, 1)),
        once=draw(st.booleans()),
        weak=draw(st.booleans()),
        target=draw(st.sampled_from(("none", "match", "other"))),
        with_name=draw(st.booleans()),
        name_form=draw(st.sampled_from(tuple(NAMES))),
        by_name=draw(st.booleans()),
        via=draw(st.sampled_from(vias)),
    )


@st.composite
def scenarios(
    draw: Any, points: Tuple[str, ...] = tuple(DRIVERS), lifecycles: Tuple[str, ...] = LIFECYCLES
) -> Scenario:
    point = draw(st.sampled_from(points))
    driver = ROWS[point]
    return Scenario(
        point_kind=point,
        # A strict bus needs the name declared (or defined): not for a plain event.
        strict=point != "event" and draw(st.booleans()),
        errors=draw(st.sampled_from(POLICIES)),
        hooks=tuple(draw(st.lists(hook_specs(driver.vias), min_size=1, max_size=5))),
        call=draw(st.sampled_from(("ok", "raise", "interrupt"))),
        dispatch=draw(st.sampled_from(EVENT_DISPATCHES) if driver.is_event else st.just("call")),
        lifecycle=draw(st.sampled_from(lifecycles)),
    )


# --- the model -----------------------------------------------------------------------------


class Boom(Exception):
    """What hook ``index`` raises (``CALL``: the call itself)."""

    def __init__(self, index: int) -> None:
        super().__init__(f"boom {index}")
        self.index = index


class Interrupt(KeyboardInterrupt):
    """A ``KeyboardInterrupt`` raised by hook ``index`` (``CALL``: the call itself)."""

    def __init__(self, index: int) -> None:
        super().__init__(f"interrupt {index}")
        self.index = index


CALL = -1
RESULT = "result"
RECOVERED = "recovered"
SKIPPED = "skipped"

# What comes out of a dispatch: None, the index of a Boom, ("group", indices) for a
# HookError, ("interrupt", index) for a KeyboardInterrupt.
Error = Union[None, int, Tuple[str, Any]]


def _is_interrupt(error: Error) -> bool:
    return isinstance(error, tuple) and error[0] == "interrupt"


def accepted(scenario: Scenario, spec: HookSpec) -> bool:
    """Invariant 1, from the library's table: whether registration takes ``spec``."""
    if spec.with_name and "with_name" not in hook_kind(spec.kind).options:
        return False  # a point's hooks get the name as ctx.name
    if spec.name_form == "pattern":
        return True  # a pattern names no place: it waits for check_pending()
    row = point_kind(ROWS[scenario.point_kind].row)
    if row.refuses_others and spec.kind not in row.runs:
        return False  # a declared name is an event, an operation point's an operation's
    if scenario.strict:
        return spec.kind in row.runs  # a strict bus knows its names
    return True


def never_runs_here(scenario: Scenario, spec: HookSpec) -> bool:
    """Invariant 6, from the library's table: ``check_pending()`` reports the hook."""
    return spec.kind not in point_kind(ROWS[scenario.point_kind].row).runs


class Outcome(NamedTuple):
    ran: List[int]  # hook indices in the order they were called
    error: Error
    result: Any  # what the call returns (points), or what collect / first return
    logged: List[int]  # the hooks whose errors the "log" policy logged, in order
    warned: bool = False  # the dispatch warned (a recovery a torch module cannot make)


REMOVALS = ("remove_during", "remove_from_thread")
"""The lifecycles that remove every hook once the first one runs."""


class Model:
    """The documented dispatch rules, written plainly, with the matrix's own table."""

    def __init__(
        self,
        scenario: Scenario,
        specs: List[HookSpec],
        registered: List[int],
    ) -> None:
        self.scenario = scenario
        self.driver = ROWS[scenario.point_kind]
        self.specs = specs  # the scenario's hooks, then those the lifecycle adds
        self.registered = registered  # indices, in registration order
        self.paused = False
        # The hook another thread registers while the first hook that runs, runs.
        self.joining = len(scenario.hooks) if scenario.lifecycle == "thread_registers" else None
        self.abandoned: List[int] = []  # around hooks left to the point's next call

    def dispatch(self) -> Outcome:
        self.ran: List[int] = []
        self.logged: List[int] = []
        self.removed = False  # the lifecycle's removal happened
        self.skipped = False
        self.warned = False
        self.unrecoverable = False  # an error a torch module re-raises whatever hooks do
        late, self.abandoned = self.abandoned, []
        if any(self.specs[i].behaviour == "teardown_raise" for i in late):
            self.warned = True  # closed after its call ended: what it raises is a warning
        if self.paused:  # nothing runs: the call alone
            return self._unhooked()
        self.now = list(self.registered)  # the hooks registered, as the call goes on
        self.snapshot = {kind: self._live(kind) for kind in HOOK_KINDS}
        started: List[int] = []
        error: Error = None
        result: Any = None
        for i in self.snapshot["around"]:  # read when the call begins, on every row
            if not self._call(i):
                continue
            if self.specs[i].behaviour == "setup_raise":
                error = i
                break
            started.append(i)
        if error is None:
            if self.driver.is_event:
                error, result = self._event_hooks(self.snapshot["event"])
            else:
                error, result = self._point_hooks()
        if error == ("interrupt", CALL) and self.driver.interrupt_closes_late:
            self.abandoned, started = started, []
        for i in reversed(started):
            if self.specs[i].behaviour == "teardown_raise":
                if self.unrecoverable and not _is_interrupt(error):
                    self.warned = True  # torch re-raises the call's own error
                else:
                    error = i  # raised in its finally block: it replaces whatever came
        return Outcome(
            self.ran, error, None if error is not None else result, self.logged, self.warned
        )

    def _live(self, kind: str) -> List[int]:
        """The hooks of ``kind`` that run here now, in order (ties: registration order)."""
        runs = RUNS[self.scenario.point_kind]
        live = [
            i
            for i in self.now
            if self.specs[i].kind == kind and kind in runs and self.specs[i].target != "other"
        ]
        return sorted(live, key=lambda i: (-self.specs[i].priority, i))

    def _hooks(self, kind: str) -> List[int]:
        """The hooks a phase of ``kind`` runs: read when the call began, or on the rows
        whose phases read them when they run, now."""
        return self._live(kind) if self.driver.phase_reads else self.snapshot[kind]

    def _unhooked(self) -> Outcome:
        if self.driver.is_event:
            result = {"collect": [], "collect_async": [], "gather": []}.get(self.scenario.dispatch)
            return Outcome([], None, result, [])
        call = self.scenario.call
        if call == "raise":
            return Outcome([], CALL, None, [])
        if call == "interrupt":
            return Outcome([], ("interrupt", CALL), None, [])
        return Outcome([], None, RESULT, [])

    def _call(self, i: int) -> bool:
        """Call hook ``i``: False if it is skipped (a once hook removed before its turn)."""
        if self.removed and self.specs[i].once:
            return False
        self.ran.append(i)
        if self.scenario.lifecycle in REMOVALS:
            self.removed = True
            self.now = []
        elif self.joining is not None:
            self.now.append(self.joining)  # registered by the time this hook returns
            self.joining = None
        return True

    def _failed(self, i: int, errors: List[int]) -> Optional[int]:
        """Hook ``i`` raised: the policy says whether that ends the dispatch (``i``)."""
        policy = self.scenario.errors
        if policy == "raise":
            return i
        (errors if policy == "collect" else self.logged).append(i)
        return None

    def _event_hooks(self, hooks: List[int]) -> Tuple[Error, Any]:
        dispatch = self.scenario.dispatch
        results: List[Any] = []
        errors: List[int] = []
        for i in hooks:
            if not self._call(i):
                continue
            behaviour = self.specs[i].behaviour
            if behaviour == "interrupt":
                return ("interrupt", i), None
            if behaviour == "raise":
                if self._failed(i, errors) is not None:
                    return i, None
                continue
            value = None if behaviour == "none" else i
            results.append(value)
            if dispatch == "first" and value is not None:
                break
        if errors:
            return ("group", tuple(errors)), None
        if dispatch == "first":
            return None, next((value for value in results if value is not None), None)
        return None, results if dispatch in ("collect", "collect_async", "gather") else None

    def _phase(self, hooks: List[int]) -> Error:
        """A pre or post phase: the error that ends it, if any."""
        errors: List[int] = []
        for i in hooks:
            if not self._call(i):
                continue
            behaviour = self.specs[i].behaviour
            if behaviour == "interrupt":
                return ("interrupt", i)
            if behaviour == "skip" and not self.driver.skips:
                behaviour = "raise"  # ctx.skip() is refused there: the hook's error
            if behaviour == "raise" and self._failed(i, errors) is not None:
                return i
            if behaviour == "skip":
                self.skipped = True
        return ("group", tuple(errors)) if errors else None

    def _point_hooks(self) -> Tuple[Error, Any]:
        error = self._phase(self._hooks("pre"))
        result: Any = None
        if error is None:
            call = self.scenario.call
            if self.skipped:
                result = SKIPPED
            elif call == "raise":
                error = CALL
            elif call == "interrupt":
                return ("interrupt", CALL), None
            else:
                result = RESULT
        if _is_interrupt(error):
            return error, None  # a BaseException passes the exception hooks by
        if error is not None:
            if not self.driver.recovers:
                return self._observed(error), None
            return self._exception_phase(error, posts_ran=False)
        error = self._phase(self._hooks("post"))
        if _is_interrupt(error):
            return error, None
        if error is not None:
            return self._exception_phase(error, posts_ran=True)
        return None, result

    def _observed(self, error: Error) -> Error:
        """The exception hooks of a row that re-raises the error of the call or of a pre
        hook whatever they do: they run as anywhere, and a recovery or a replacement warns."""
        self.unrecoverable = True
        for i in self._hooks("exception"):
            if not self._call(i):
                continue
            behaviour = self.specs[i].behaviour
            if behaviour in ("raise", "recover_then_raise", "recover"):
                self.warned = True
            if behaviour == "recover":
                break
        return error

    def _exception_phase(self, error: Error, posts_ran: bool) -> Tuple[Error, Any]:
        for i in self._hooks("exception"):
            if not self._call(i):
                continue
            behaviour = self.specs[i].behaviour
            if behaviour in ("raise", "recover_then_raise"):
                error = i  # raising replaces the error; a recovery before it is void
            elif behaviour == "recover":
                if not posts_ran:  # every post hook runs on the value
                    late = self._phase(self._hooks("post"))
                    if late is not None:
                        return late, None
                return None, RECOVERED
        return error, None


# --- the real thing ----------------------------------------------------------------------


class Payload:
    """The call's argument: nothing may keep it alive after the call."""


def _collect_young_then_all(alive: Callable[[], Any]) -> None:
    """Collect the young generations, and all of them only if ``alive()`` still is (rare):
    a full collection costs tens of milliseconds in a process that imported torch."""
    gc.collect(1)
    if alive() is not None:
        gc.collect()


def _error_of(raised: BaseException) -> Error:
    if isinstance(raised, Boom):
        return raised.index
    if isinstance(raised, Interrupt):
        return ("interrupt", raised.index)
    assert isinstance(raised, HookError), repr(raised)
    return ("group", tuple(error.index for error in raised.exceptions))  # type: ignore[attr-defined]


class _Logged(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.indices: List[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        self.indices.append(error.index if isinstance(error, Boom) else -99)


class Bench:
    """One scenario on a real bus: the point, the hooks, and what they saw."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.driver = ROWS[scenario.point_kind]
        self.bus = EventBus(strict=scenario.strict, errors=scenario.errors)  # type: ignore[arg-type]
        self.specs: List[HookSpec] = list(scenario.hooks)
        self.log: List[int] = []
        self.started: List[int] = []
        self.finished: List[int] = []
        self.handles: List[Handle] = []
        self.registered: List[int] = []  # the indices of self.handles, in order
        self.hooks: List[Callable[..., Any]] = []  # holds the weak ones alive
        self.targets: List[Any] = []  # and the weakly held targets
        self.declared = scenario.point_kind == "declared_event"
        self.lifecycle_done = False
        self.kept: List[weakref.ref[Any]] = []  # arguments a point lets go of at its next call
        self.call, self.subject = self.driver.make(self)
        self.is_async = self.driver.is_async or scenario.dispatch in (
            "emit_async",
            "collect_async",
            "gather",
        )

    def emitter(self, sender: Any) -> Callable[[Any], Any]:
        bus, how = self.bus, self.scenario.dispatch
        if how == "emit":
            return lambda value: bus.emit(NAME, sender, value)
        if how == "collect":
            return lambda value: bus.collect(NAME, sender, value)
        if how == "first":
            return lambda value: bus.first(NAME, sender, value)
        if how == "emit_async":
            return lambda value: asyncio.run(bus.emit_async(NAME, sender, value))
        if how == "collect_async":
            return lambda value: asyncio.run(bus.collect_async(NAME, sender, value))
        return lambda value: asyncio.run(bus.gather(NAME, sender, value))

    # --- hooks ---

    def extra_spec(self) -> HookSpec:
        """A plain hook of a kind that runs here, for the lifecycles that add one."""
        kind = "event" if self.driver.is_event else "pre"
        return HookSpec(kind, "ok", 0, False, False, "none", False, "plain", False)

    def _lifecycle(self) -> None:
        """What the first hook that runs does, per the scenario's lifecycle."""
        lifecycle = self.scenario.lifecycle
        if lifecycle == "remove_during":
            for handle in list(self.handles):
                handle.remove()
        elif lifecycle in ("thread_registers", "remove_from_thread") and not self.lifecycle_done:
            self.lifecycle_done = True
            work = self.add_extra if lifecycle == "thread_registers" else self.remove_handles
            thread = threading.Thread(target=work)
            thread.start()
            thread.join(timeout=10)
            assert not thread.is_alive(), f"{lifecycle}: the other thread hung"

    def remove_handles(self) -> None:
        for handle in list(self.handles):
            handle.remove()

    def add_extra(self) -> None:
        spec = self.extra_spec()
        index = len(self.specs)
        self.specs.append(spec)
        self.register_one(index, spec)

    def hook_for(self, index: int, spec: HookSpec) -> Callable[..., Any]:
        log = self.log

        def ran() -> None:
            log.append(index)
            self._lifecycle()

        if spec.kind == "around":

            def around(ctx: CallContext) -> Generator[None, None, None]:
                ran()
                if spec.behaviour == "setup_raise":
                    raise Boom(index)
                self.started.append(index)
                try:
                    yield
                finally:
                    self.finished.append(index)
                    if spec.behaviour == "teardown_raise":
                        raise Boom(index)  # it replaces the error: the point of this draw

            hook: Callable[..., Any] = around
        elif spec.kind == "event":

            def outcome() -> Any:
                ran()
                if spec.behaviour == "raise":
                    raise Boom(index)
                if spec.behaviour == "interrupt":
                    raise Interrupt(index)
                return None if spec.behaviour == "none" else index

            if spec.by_name and self.declared:

                def takes_value(value: Any) -> Any:
                    return outcome()

                hook = takes_value
            else:

                def on_event(*args: Any, **kwargs: Any) -> Any:
                    return outcome()

                hook = on_event
        else:

            def on_call(ctx: CallContext) -> None:
                ran()
                behaviour = spec.behaviour
                if behaviour in ("recover", "recover_then_raise"):
                    ctx.recover(RECOVERED)
                if behaviour == "skip":
                    if not self.driver.skips:
                        with pytest.raises(RuntimeError):  # refused there, loudly
                            ctx.skip(SKIPPED)
                        raise Boom(index)
                    ctx.skip(SKIPPED)
                if behaviour in ("raise", "recover_then_raise"):
                    raise Boom(index)
                if behaviour == "interrupt":
                    raise Interrupt(index)

            hook = on_call
        hook.__name__ = hook.__qualname__ = f"hook_{index}"
        return hook

    def register_one(self, index: int, spec: HookSpec) -> Optional[str]:
        """Register hook ``index``; return why it was refused, or None."""
        hook = self.hook_for(index, spec)
        self.hooks.append(hook)
        options: Dict[str, Any] = {"priority": spec.priority, "once": spec.once}
        if spec.weak:
            options["weak"] = True
        if spec.with_name:
            options["with_name"] = True
        if spec.target != "none":
            options["target"] = self.subject if spec.target == "match" else Payload()
            self.targets.append(options["target"])  # a weakly held target stays alive
        try:
            handle = self.driver.register(self, spec, hook, options)
        except (TypeError, ValueError, UnknownNameError) as error:
            return str(error)  # the message only: the error holds this frame
        self.handles.append(handle)
        self.registered.append(index)
        return None

    def register(self) -> List[int]:
        """Register every hook; return the indices registered (invariant 1 checked)."""
        for index, spec in enumerate(self.scenario.hooks):
            refusal = self.register_one(index, spec)
            assert (refusal is None) == accepted(self.scenario, spec), (
                f"hook {index}: {'refused: ' + refusal if refusal else 'accepted'}"
            )
        return list(self.registered)

    def remove_all(self) -> List[weakref.ref[Any]]:
        """Remove every handle and drop the hooks; return weak references to the hooks."""
        alive = [weakref.ref(hook) for hook in self.hooks]
        for handle in self.handles:
            handle.remove()
        del self.handles[:], self.hooks[:]
        return alive

    # --- dispatch ---

    def dispatch(self) -> Outcome:
        del self.log[:]
        del self.started[:]
        del self.finished[:]
        payload = Payload()
        payload_alive = weakref.ref(payload)
        error: Error = None
        notes: List[List[str]] = []
        result: Any = None
        logged = _Logged()
        logger = logging.getLogger("hookbus")
        # Only to the handler that counts: pytest's would keep each record, and with it
        # the error's traceback and the frames that held the payload.
        logger.addHandler(logged)
        propagate, logger.propagate = logger.propagate, False
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    result = self.call(payload)
                except (Boom, Interrupt, HookError) as raised:
                    error = _error_of(raised)
                    members = raised.exceptions if isinstance(raised, HookError) else (raised,)
                    notes = [list(getattr(member, "__notes__", [])) for member in members]
                    del raised, members  # its traceback holds the frames that held the payload
            warned = [str(each.message) for each in caught]
            del caught
        finally:
            logger.removeHandler(logged)
            logger.propagate = propagate
        del payload
        if self.scenario.dispatch in ("emit", "emit_async"):
            result = None
        self.notes = notes
        if payload_alive() is not None and self.is_async:
            # asyncio keeps a failed task's error in a cycle with the frames that held
            # the argument: not hookbus's to break.
            _collect_young_then_all(payload_alive)
        earlier, self.kept = self.kept, []
        assert all(ref() is None for ref in earlier), "an argument outlived the point's next call"
        if error == ("interrupt", CALL) and self.driver.interrupt_keeps_argument:
            self.kept.append(payload_alive)  # let go of at the point's next call
        else:
            assert payload_alive() is None, "a call's argument outlived the call"
        self.warnings = warned
        return Outcome(list(self.log), error, result, logged.indices, bool(warned))


# --- the invariants ----------------------------------------------------------------------


def _check_notes(got: Outcome, notes: Any) -> None:
    """Invariant 2's notes: each error a hook raised names that hook."""
    if got.error is None or _is_interrupt(got.error):
        return
    indices = got.error[1] if isinstance(got.error, tuple) else (got.error,)
    for index, member_notes in zip(indices, notes):
        if index != CALL:
            assert any(f"hook_{index}" in note for note in member_notes), member_notes


def check(scenario: Scenario) -> None:
    """Run ``scenario`` and check every invariant."""
    bench = Bench(scenario)
    registered = bench.register()
    lifecycle = scenario.lifecycle
    model = Model(scenario, bench.specs, list(registered))

    # The first dispatch: invariants 2, 3, 5.
    trace: Optional[Trace] = None
    if lifecycle == "trace":
        trace = bench.bus.trace()
        with trace:
            got = bench.dispatch()
    elif lifecycle == "pause":
        with bench.bus.paused(bench.driver.names["plain"]):
            got = bench.dispatch()
    elif lifecycle == "isolate":
        with isolate(bench.bus):
            bench.add_extra()  # a hook the block adds: it runs, then goes with the block
            model.registered = [*registered, len(bench.specs) - 1]
            got = bench.dispatch()
    else:
        got = bench.dispatch()
    model.paused = lifecycle == "pause"
    expected = model.dispatch()
    model.paused = False
    assert got == expected, (
        f"ran/error/result/logged/warned {got} != model {expected}; warnings: {bench.warnings}"
    )
    abandoned = list(bench.started) if model.abandoned else []
    finished = [] if model.abandoned else list(reversed(bench.started))
    assert bench.finished == finished, "around hooks finished out of order"
    _check_notes(got, bench.notes)
    if trace is not None:
        recorded = sorted(bench.handles.index(r.handle) for r in trace.records)
        # An around hook closed at the point's next call finished after the trace.
        ran = sorted(bench.registered.index(i) for i in got.ran if i not in model.abandoned)
        assert recorded == ran, "the trace missed hooks that ran"
        del trace

    # The second dispatch: invariant 4 (once hooks, removals, additions, isolation).
    claimed = {i for i in got.ran if bench.specs[i].once}
    if lifecycle in REMOVALS and got.ran:
        model.registered = []
    elif lifecycle == "isolate":
        model.registered = list(registered)  # the once hooks that ran are back
    else:
        model.registered = [i for i in bench.registered if i not in claimed]
    again = bench.dispatch()
    expected = model.dispatch()
    assert again == expected, (
        f"second dispatch: {again} != model {expected}; warnings: {bench.warnings}"
    )
    late = list(reversed(abandoned))  # closed at the point's next call, before it starts any
    assert bench.finished[: len(late)] == late, "the abandoned around hooks were not closed"

    # check_pending: invariant 6.
    reported = set()
    try:
        bench.bus.check_pending()
    except UnknownNameError as error:
        reported = {id(handle) for handle in error.handles}
    pending = [
        (index, id(handle) in reported)
        for index, handle in zip(bench.registered, bench.handles)
        if handle.active
    ]  # a comprehension: no handle stays bound in this frame
    for index, found in pending:
        should = never_runs_here(scenario, bench.specs[index])
        assert found == should, f"check_pending on hook {index}: reported {found}"

    # Lifetimes: invariant 7.
    hooks_alive = bench.remove_all()
    assert bench.bus.hooks() == []
    bench.driver.settle(bench)
    assert all(ref() is None for ref in bench.kept), "an argument outlived the point's next call"
    for ref in hooks_alive:
        if ref() is not None and bench.is_async:
            _collect_young_then_all(ref)  # the cycles of asyncio's failed tasks
    assert all(ref() is None for ref in hooks_alive), "a removed hook is still referenced"


# --- the tests -----------------------------------------------------------------------------


def _one(kind: str, behaviour: str = "ok", **options: Any) -> HookSpec:
    fields: Dict[str, Any] = dict(
        kind=kind,
        behaviour=behaviour,
        priority=0,
        once=False,
        weak=False,
        target="none",
        with_name=False,
        name_form="plain",
        by_name=False,
    )
    fields.update(options)
    return HookSpec(**fields)


def _pinned(point: str, hooks: Tuple[HookSpec, ...], **options: Any) -> Scenario:
    fields: Dict[str, Any] = dict(
        point_kind=point,
        strict=False,
        errors="raise",
        hooks=hooks,
        call="ok",
        dispatch="emit" if ROWS[point].is_event else "call",
        lifecycle="none",
    )
    fields.update(options)
    return Scenario(**fields)


# The crossings that once broke the matrix, pinned.
_ONCE_BROKEN = (
    _pinned("function", (_one("around", "ok"),), lifecycle="trace"),
    _pinned("event", (_one("around", "ok"),), lifecycle="trace"),
    _pinned("function", (_one("around", "setup_raise"),)),
    _pinned("event", (_one("event", "ok"),), dispatch="gather", lifecycle="trace"),
    _pinned("event", (_one("around", "ok"),)),
    _pinned("declared_event", (_one("around", "ok"),), strict=True),
    _pinned("declared_event", (_one("pre", "ok"),)),
    _pinned("function", (_one("exception", "recover_then_raise"),), call="raise"),
    _pinned("declared_event", (_one("event", "raise", by_name=True),)),
    _pinned(
        "function",
        (_one("exception", "recover"), _one("post", "ok"), _one("post", "ok")),
        call="raise",
    ),
    _pinned(
        "function",
        (_one("exception", "raise", priority=1), _one("exception", "recover")),
        call="raise",
    ),
    *(
        _pinned("event", (_one("event", "raise"), _one("event")), errors=policy, dispatch=how)
        for policy in ("log", "collect")
        for how in ("gather", "collect")
    ),
    *(
        _pinned(
            "event",
            (_one("event", "raise"), _one("event", "interrupt")),
            errors=policy,
            dispatch=how,
        )
        for policy in ("log", "collect")
        for how in ("gather", "emit_async", "emit")
    ),
)


@pytest.mark.parametrize("scenario", _ONCE_BROKEN)
def test_crossings_that_once_broke_hold(scenario: Scenario) -> None:
    check(scenario)


@settings(settings.get_profile(PROFILE))
@given(scenarios())
def test_crossings_hold_everywhere(scenario: Scenario) -> None:
    """The whole matrix: every invariant, for every scenario drawn."""
    check(scenario)


@st.composite
def compiled_scenarios(draw: Any) -> Scenario:
    """Scenarios whose hooked calls compile: plain around, pre, post and exception hooks
    (any behaviour, priority and name form) on a sync function or method, errors raised."""
    specs = st.builds(
        lambda kind, behaviour, priority, name_form: _one(
            kind, behaviour, priority=priority, name_form=name_form
        ),
        st.sampled_from(("around", "pre", "post", "exception")),
        st.sampled_from(
            sum((BEHAVIOURS[kind] for kind in ("around", "pre", "post", "exception")), ())
        ),
        st.integers(-1, 1),
        st.sampled_from(tuple(NAMES)),
    ).filter(lambda spec: spec.behaviour in BEHAVIOURS[spec.kind])
    return _pinned(
        draw(st.sampled_from(("function", "method"))),
        tuple(draw(st.lists(specs, min_size=1, max_size=5))),
        strict=draw(st.booleans()),
        call=draw(st.sampled_from(("ok", "raise", "interrupt"))),
        lifecycle=draw(st.sampled_from(tuple(set(LIFECYCLES) - {"trace"}))),
    )


@settings(settings.get_profile(PROFILE))
@given(compiled_scenarios())
def test_crossings_hold_on_compiled_calls(scenario: Scenario) -> None:
    compiled: List[bool] = []
    compile_call = _hookpoint.compile_call

    def recording(plan: Any, **point: Any) -> Any:
        run = compile_call(plan, **point)
        compiled.append(run is not point["reference"])
        return run

    # Compiled from a plan's first call (not its second), so both dispatches run it.
    first = _hookpoint.HookPoint._run_compiling
    with (
        mock.patch.object(_hookpoint, "compile_call", recording),
        mock.patch.object(_hookpoint.HookPoint, "_run_first", first),
    ):
        check(scenario)
    assert any(compiled), "no call of the scenario ran compiled code"
