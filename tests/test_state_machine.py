"""A hypothesis state machine: random use of the bus against a tiny reference model.

The model below is the specification written plainly: a list of registrations,
a stack of scopes, a stack of pauses, the open traces, and an ``emit`` that takes
a snapshot of the matching hooks (sorted by priority, then registration order) and
runs it. After every step the machine compares the real bus with the model: which
hooks fired, in what order, at what nesting depth, with what results or errors,
what each trace recorded, and what introspection reports.

Besides plain hooks, it registers a C type's bound method weakly (a dict's
``__setitem__``), whose object it may drop; it exits scopes from another thread, in
any order; and it opens and closes traces in any order, from any thread.

Profiles: ``HOOKBUS_HYPOTHESIS_PROFILE=ci`` runs 2,000 examples; the default,
``dev``, runs 200.
"""

from __future__ import annotations

import collections
import fnmatch
import logging
import os
import threading
from typing import Any, Callable, Counter, Dict, List, NamedTuple, Optional, Tuple

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from hookbus import EventBus, Handle, HookError, Trace

settings.register_profile("hookbus-dev", max_examples=200, stateful_step_count=40, deadline=None)
settings.register_profile(
    "hookbus-ci",
    max_examples=2000,
    stateful_step_count=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
PROFILE = "hookbus-" + os.environ.get("HOOKBUS_HYPOTHESIS_PROFILE", "dev")

NAMES = ("a", "a.x", "b.x")
PATTERNS = ("a.*", "*", "?.x", "[ab]")
SENDERS = (object(), object())
MAX_DEPTH = 2
POLICIES = ("raise", "collect", "log")


class Spec(NamedTuple):
    """One registration: where, how, and what the hook does when called."""

    hook_id: int
    name: str
    priority: int
    once: bool
    target: Optional[int]  # an index into SENDERS
    action: Tuple[Any, ...]


class HookFailure(Exception):
    """What a hook with the action ("raise",) raises."""

    def __init__(self, hook_id: int) -> None:
        super().__init__(f"hook {hook_id} failed")
        self.hook_id = hook_id


class ModelGroup(Exception):
    """The model's HookError."""

    def __init__(self, errors: List[Exception]) -> None:
        super().__init__("group")
        self.errors = errors


def shape(error: BaseException) -> Any:
    """An error as plain data, comparable between the bus and the model."""
    if isinstance(error, HookFailure):
        return ("fail", error.hook_id)
    if isinstance(error, HookError):
        return ("group", tuple(shape(e) for e in error.exceptions))
    if isinstance(error, ModelGroup):
        return ("group", tuple(shape(e) for e in error.errors))
    raise error  # anything else is a bug in the bus (or the test)


def is_pattern(name: str) -> bool:
    return any(c in name for c in "*?[")


class Sink(dict):  # type: ignore[type-arg]
    """A dict that supports weak references: its ``__setitem__`` is a weak hook."""


def in_thread(action: Callable[[], None]) -> None:
    errors: List[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    if errors:
        raise errors[0]


# --- the reference model -----------------------------------------------------------------


class Model:
    def __init__(self) -> None:
        self.specs: List[Spec] = []
        self.active: Dict[int, bool] = {}
        self.scopes: List[List[int]] = []
        self.pauses: List[Optional[str]] = []
        self.policy = "raise"
        self.calls: List[Tuple[int, int]] = []
        self.logged: List[Any] = []
        self.traces: List[Counter[int]] = []  # every trace opened: calls per hook
        self.open_traces: List[Counter[int]] = []
        self.sinks: Dict[int, Dict[Optional[int], int]] = {}  # a sink's hook id: contents
        self.next_id = 0

    def register(
        self, name: str, priority: int, once: bool, target: Optional[int], action: Any
    ) -> int:
        spec = Spec(self.next_id, name, priority, once, target, action)
        self.next_id += 1
        self.specs.append(spec)
        self.active[spec.hook_id] = True
        if self.scopes:
            self.scopes[-1].append(spec.hook_id)
        return spec.hook_id

    def remove(self, hook_id: int) -> None:
        if hook_id in self.active:
            self.active[hook_id] = False

    def paused(self, name: str) -> bool:
        return any(
            p is None or p == name or (is_pattern(p) and fnmatch.fnmatchcase(name, p))
            for p in self.pauses
        )

    def hooks_for(self, name: str) -> List[Spec]:
        """The active hooks registered for ``name``, in dispatch order."""
        matching = [
            s
            for s in self.specs
            if self.active[s.hook_id]
            and (s.name == name or (is_pattern(s.name) and fnmatch.fnmatchcase(name, s.name)))
        ]
        return sorted(matching, key=lambda s: (-s.priority, s.hook_id))

    def emit(self, name: str, sender: Optional[int], depth: int) -> List[Any]:
        if self.paused(name):
            return []
        snapshot = [s for s in self.hooks_for(name) if s.target is None or s.target == sender]
        results: List[Any] = []
        errors: List[Exception] = []
        for spec in snapshot:
            if spec.once:
                if not self.active[spec.hook_id]:
                    continue  # already run by a nested emission, or removed meanwhile
                self.active[spec.hook_id] = False
            try:
                results.append(self.run(spec, sender, depth))
            except Exception as error:
                if self.policy == "raise":
                    raise
                if self.policy == "collect":
                    errors.append(error)
                else:
                    self.logged.append(shape(error))
        if errors:
            raise ModelGroup(errors)
        return results

    def run(self, spec: Spec, sender: Optional[int], depth: int) -> Any:
        for trace in self.open_traces:
            trace[spec.hook_id] += 1
        kind = spec.action[0]
        if kind == "sink":  # sink[sender] = depth
            self.sinks[spec.hook_id][sender] = depth
            return None
        self.calls.append((spec.hook_id, depth))
        if kind == "raise":
            raise HookFailure(spec.hook_id)
        if kind == "emit" and depth < MAX_DEPTH:
            _, name, inner_sender, via = spec.action
            inner = self.emit(name, inner_sender, depth + 1)
            return (spec.hook_id, inner if via == "collect" else None)
        if kind == "remove":
            self.remove(spec.action[1])
        if kind == "register":
            self.register(spec.action[1], spec.action[2], False, None, ("return",))
        return spec.hook_id


# --- the real bus, driven the same way ---------------------------------------------------


class Real:
    def __init__(self) -> None:
        self.bus = EventBus("machine")
        self.handles: Dict[int, Handle] = {}
        self.ids: Dict[int, int] = {}  # id(handle) -> hook id
        self.scopes: List[Any] = []
        self.pauses: List[Any] = []
        self.calls: List[Tuple[int, int]] = []
        self.traces: List[Trace] = []
        self.open_traces: List[Trace] = []
        self.sinks: Dict[int, Sink] = {}
        self.next_id = 0

    def register_sink(self, name: str, priority: int, once: bool, target: Optional[int]) -> int:
        hook_id = self.next_id
        self.next_id += 1
        sink = self.sinks[hook_id] = Sink()
        handle = self.bus.on(
            name,
            sink.__setitem__,
            priority=priority,
            once=once,
            target=None if target is None else SENDERS[target],
            weak=True,
        )
        self.handles[hook_id] = handle
        self.ids[id(handle)] = hook_id
        return hook_id

    def register(
        self, name: str, priority: int, once: bool, target: Optional[int], action: Any
    ) -> int:
        spec = Spec(self.next_id, name, priority, once, target, action)
        self.next_id += 1

        def hook(sender: object, depth: int) -> Any:
            return self.run(spec, depth)

        handle = self.bus.on(
            name,
            hook,
            priority=priority,
            once=once,
            target=None if target is None else SENDERS[target],
        )
        self.handles[spec.hook_id] = handle
        self.ids[id(handle)] = spec.hook_id
        return spec.hook_id

    def emit(self, name: str, sender: Optional[int], depth: int, via: str) -> Any:
        real_sender = None if sender is None else SENDERS[sender]
        if via == "collect":
            return self.bus.collect(name, real_sender, depth)
        self.bus.emit(name, real_sender, depth)
        return None

    def run(self, spec: Spec, depth: int) -> Any:
        self.calls.append((spec.hook_id, depth))
        kind = spec.action[0]
        if kind == "raise":
            raise HookFailure(spec.hook_id)
        if kind == "emit" and depth < MAX_DEPTH:
            _, name, inner_sender, via = spec.action
            return (spec.hook_id, self.emit(name, inner_sender, depth + 1, via))
        if kind == "remove":
            handle = self.handles.get(spec.action[1])
            if handle is not None:
                handle.remove()
        if kind == "register":
            self.register(spec.action[1], spec.action[2], False, None, ("return",))
        return spec.hook_id


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.shapes: List[Any] = []

    def emit(self, record: logging.LogRecord) -> None:
        assert record.exc_info is not None
        self.shapes.append(shape(record.exc_info[1]))  # type: ignore[arg-type]


# --- the machine -------------------------------------------------------------------------


def run_here(action: Callable[[], Any]) -> None:
    action()


priorities = st.sampled_from((-5, 0, 0, 0, 5, 10))
event_names = st.sampled_from(NAMES)
hook_names = st.sampled_from(NAMES + PATTERNS)
senders = st.sampled_from((None, 0, 1))
actions = st.one_of(
    st.just(("return",)),
    st.just(("return",)),
    st.just(("raise",)),
    st.tuples(st.just("emit"), event_names, senders, st.sampled_from(("emit", "collect"))),
    st.tuples(st.just("remove"), st.integers(0, 25)),
    st.tuples(st.just("register"), hook_names, priorities),
)
registrations = st.tuples(
    hook_names, priorities, st.booleans(), st.sampled_from((None, None, 0, 1)), actions
)


class BusMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.real = Real()
        self.model = Model()
        self.log_handler = ListHandler()
        self.logger = logging.getLogger("hookbus")
        self.logger.addHandler(self.log_handler)
        self.propagate = self.logger.propagate
        self.logger.propagate = False

    @rule(registrations=st.lists(registrations, min_size=1, max_size=4))
    def register(self, registrations: List[Tuple[Any, ...]]) -> None:
        for name, priority, once, only_for, action in registrations:
            real_id = self.real.register(name, priority, once, only_for, action)
            model_id = self.model.register(name, priority, once, only_for, action)
            assert real_id == model_id

    @rule(
        name=hook_names,
        priority=priorities,
        once=st.booleans(),
        only_for=st.sampled_from((None, None, 0, 1)),
    )
    def register_weak_c_method(
        self, name: str, priority: int, once: bool, only_for: Optional[int]
    ) -> None:
        """A weak hook that is a C type's bound method: alive exactly as long as its object."""
        real_id = self.real.register_sink(name, priority, once, only_for)
        model_id = self.model.register(name, priority, once, only_for, ("sink",))
        self.model.sinks[model_id] = {}
        assert real_id == model_id

    @precondition(lambda self: bool(self.real.sinks))
    @rule(pick=st.integers(0, 30))
    def drop_weak_c_method_object(self, pick: int) -> None:
        hook_id = sorted(self.real.sinks)[pick % len(self.real.sinks)]
        del self.real.sinks[hook_id]  # its only strong reference: freed now, by refcount
        self.model.remove(hook_id)
        del self.model.sinks[hook_id]

    @precondition(lambda self: len(self.model.open_traces) < 3)
    @rule(elsewhere=st.booleans())
    def trace_open(self, elsewhere: bool) -> None:
        trace = self.real.bus.trace()
        (in_thread if elsewhere else run_here)(trace.__enter__)
        self.real.traces.append(trace)
        self.real.open_traces.append(trace)
        self.model.traces.append(collections.Counter())
        self.model.open_traces.append(self.model.traces[-1])

    @precondition(lambda self: bool(self.model.open_traces))
    @rule(pick=st.integers(0, 2), elsewhere=st.booleans())
    def trace_close(self, pick: int, elsewhere: bool) -> None:
        """Close any open trace, not only the last opened, here or in another thread."""
        index = pick % len(self.model.open_traces)
        trace = self.real.open_traces.pop(index)
        (in_thread if elsewhere else run_here)(lambda: trace.__exit__(None, None, None))
        self.model.open_traces.pop(index)

    @rule(hook_id=st.integers(0, 30))
    def remove(self, hook_id: int) -> None:
        handle = self.real.handles.get(hook_id)
        if handle is not None:
            handle.remove()
        self.model.remove(hook_id)

    @rule()
    def scope_enter(self) -> None:
        scope = self.real.bus.scope()
        scope.__enter__()
        self.real.scopes.append(scope)
        self.model.scopes.append([])

    @precondition(lambda self: bool(self.model.scopes))
    @rule()
    def scope_exit(self) -> None:
        self.real.scopes.pop().__exit__(None, None, None)
        for hook_id in self.model.scopes.pop():
            self.model.remove(hook_id)

    @precondition(lambda self: bool(self.model.scopes))
    @rule(pick=st.integers(0, 3))
    def scope_exit_elsewhere(self, pick: int) -> None:
        """Exit any open scope from another thread: it closes, the others stay open."""
        index = pick % len(self.model.scopes)
        scope = self.real.scopes.pop(index)
        in_thread(lambda: scope.__exit__(None, None, None))
        for hook_id in self.model.scopes.pop(index):
            self.model.remove(hook_id)

    @rule(name=st.one_of(st.none(), hook_names))
    def pause_enter(self, name: Optional[str]) -> None:
        pause = self.real.bus.paused(name)
        pause.__enter__()
        self.real.pauses.append(pause)
        self.model.pauses.append(name)

    @precondition(lambda self: bool(self.model.pauses))
    @rule()
    def pause_exit(self) -> None:
        self.real.pauses.pop().__exit__(None, None, None)
        self.model.pauses.pop()

    @rule(policy=st.sampled_from(POLICIES))
    def set_policy(self, policy: Any) -> None:
        self.real.bus.errors = policy
        self.model.policy = policy

    @rule(name=event_names, sender=senders, via=st.sampled_from(("emit", "collect")))
    def emit(self, name: str, sender: Optional[int], via: str) -> None:
        """An emission; hooks with an "emit" action make it a nested one."""
        self.check_emission(name, sender, via)

    @rule(name=event_names, sender=senders)
    def emit_again(self, name: str, sender: Optional[int]) -> None:
        """Emissions are what the machine checks: make them likelier than other steps."""
        self.check_emission(name, sender, "collect")

    def check_emission(self, name: str, sender: Optional[int], via: str) -> None:
        self.real.calls.clear()
        self.model.calls.clear()
        self.log_handler.shapes.clear()
        self.model.logged.clear()
        try:
            real: Any = ("ok", self.real.emit(name, sender, 0, via))
        except (HookFailure, HookError) as error:
            real = ("error", shape(error))
        try:
            result = self.model.emit(name, sender, 0)
            expected: Any = ("ok", result if via == "collect" else None)
        except (HookFailure, ModelGroup) as error:
            expected = ("error", shape(error))
        assert self.real.calls == self.model.calls
        assert real == expected
        assert self.log_handler.shapes == self.model.logged
        assert self.real.next_id == self.model.next_id

    @invariant()
    def same_hooks(self) -> None:
        bus, model = self.real.bus, self.model
        active = {i for i, h in self.real.handles.items() if h.active}
        assert active == {i for i, alive in model.active.items() if alive}
        # introspection: all hooks, by name then dispatch order; per name; event names
        listed = [self.real.ids[id(h)] for h in bus.hooks()]
        expected = sorted(active, key=lambda i: (model.specs[i].name, -model.specs[i].priority, i))
        assert listed == expected
        for name in NAMES:
            assert [self.real.ids[id(h)] for h in bus.hooks(name)] == [
                s.hook_id for s in model.hooks_for(name)
            ]
        assert bus.events() == sorted({model.specs[i].name for i in active})

    @invariant()
    def same_traces(self) -> None:
        recorded = [
            collections.Counter(self.real.ids[id(record.handle)] for record in trace.records)
            for trace in self.real.traces
        ]
        assert recorded == self.model.traces

    @invariant()
    def same_weak_c_method_objects(self) -> None:
        for hook_id, sink in self.real.sinks.items():
            received = {None if key is None else SENDERS.index(key): v for key, v in sink.items()}
            assert received == self.model.sinks[hook_id]

    def teardown(self) -> None:
        while self.real.open_traces:
            self.real.open_traces.pop().__exit__(None, None, None)
        while self.real.pauses:
            self.real.pauses.pop().__exit__(None, None, None)
        while self.real.scopes:
            self.real.scopes.pop().__exit__(None, None, None)
        self.logger.removeHandler(self.log_handler)
        self.logger.propagate = self.propagate


BusMachine.TestCase.settings = settings.get_profile(PROFILE)
# The CI profile's 2,000 examples take about 3 minutes on a quiet 2-core machine, near
# the suite's 300 s limit (which is there to catch hangs): this test gets its own.
TestBusMachine = pytest.mark.timeout(1200)(BusMachine.TestCase)
