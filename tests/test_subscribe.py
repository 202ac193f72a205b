"""Hook classes: bus.subscribe(obj), @listens, declared event sets, weak observers."""

from __future__ import annotations

import asyncio
import gc
import sys
import types
from typing import Any, List

import pytest

import hookbus
from hookbus import EventBus, Priority, listens


class Recorder:
    """Appends what its hooks saw to a shared list, tagged with its name."""

    def __init__(self, log: List[Any], tag: str = "") -> None:
        self.log = log
        self.tag = tag


# --- marked methods ---------------------------------------------------------------


def test_marked_methods_are_bound_to_their_own_instance() -> None:
    class Counter(Recorder):
        @listens("tick")
        def on_tick(self, n: int) -> None:
            self.log.append((self.tag, n))

    bus, log = EventBus(), []
    bus.subscribe(Counter(log, "a"))
    bus.subscribe(Counter(log, "b"))
    bus.emit("tick", 1)
    assert log == [("a", 1), ("b", 1)]


def test_one_method_may_listen_to_several_names_and_kinds() -> None:
    bus, log = EventBus(), []

    @bus.hookable("load")
    def load(path: str) -> str:
        return path.upper()

    class Audit(Recorder):
        @listens("saved")
        @listens("deleted")
        def on_change(self, doc: str) -> None:
            self.log.append(("change", doc))

        @listens("load", kind="post")
        def after_load(self, ctx: hookbus.CallContext) -> None:
            self.log.append(("loaded", ctx.result))

    group = bus.subscribe(Audit(log))
    bus.emit("saved", "a")
    bus.emit("deleted", "b")
    assert load("x") == "X"
    assert log == [("change", "a"), ("change", "b"), ("loaded", "X")]
    assert sorted((h.kind, h.name) for h in group) == [
        ("event", "deleted"),
        ("event", "saved"),
        ("post", "load"),
    ]


def test_pre_and_exception_methods_change_the_call() -> None:
    bus = EventBus()

    @bus.hookable("parse")
    def parse(text: str) -> int:
        return int(text)

    class Lenient:
        @listens("parse", kind="pre")
        def strip(self, ctx: hookbus.CallContext) -> None:
            ctx.args = (ctx.args[0].strip(),)

        @listens("parse", kind="exception")
        def default(self, ctx: hookbus.CallContext) -> None:
            ctx.recover(-1)

    with bus.subscribe(Lenient()):
        assert parse(" 12 ") == 12
        assert parse("oops") == -1
    with pytest.raises(ValueError, match="oops"):
        parse("oops")


def test_removing_the_group_removes_every_method() -> None:
    class Both:
        @listens("a")
        def on_a(self) -> None:
            raise AssertionError("removed hook ran")

        @listens("b")
        def on_b(self) -> None:
            raise AssertionError("removed hook ran")

    bus = EventBus()
    group = bus.subscribe(Both())
    assert group.active
    assert len(group) == 2
    group.remove()
    assert not group.active
    assert bus.hooks() == []
    bus.emit("a")
    bus.emit("b")


def test_once_and_patterns_work_on_methods() -> None:
    class Watcher(Recorder):
        @listens("train.*")
        def any_train(self, step: int) -> None:
            self.log.append(("any", step))

        @listens("train.end", once=True)
        def first_end(self, step: int) -> None:
            self.log.append(("end", step))

    bus, log = EventBus(), []
    bus.subscribe(Watcher(log))
    bus.emit("train.end", 1)
    bus.emit("train.end", 2)
    bus.emit("eval.end", 3)
    assert log == [("any", 1), ("end", 1), ("any", 2)]


def test_target_applies_to_every_method() -> None:
    class Display(Recorder):
        @listens("reading")
        def show(self, sensor: object, value: float) -> None:
            self.log.append(value)

    kitchen, garage = object(), object()
    bus, log = EventBus(), []
    bus.subscribe(Display(log), target=kitchen)
    bus.emit("reading", garage, 5.0)
    bus.emit("reading", kitchen, 21.5)
    assert log == [21.5]


def test_classmethods_staticmethods_and_async_methods_can_listen() -> None:
    log: List[Any] = []

    class Mixed:
        @listens("e")
        @classmethod
        def on_class(cls, x: int) -> None:
            log.append((cls.__name__, x))

        @staticmethod
        @listens("e")
        def on_static(x: int) -> None:
            log.append(("static", x))

        @listens("e")
        async def on_async(self, x: int) -> None:
            await asyncio.sleep(0)
            log.append(("async", x))

    bus = EventBus()
    bus.subscribe(Mixed())
    asyncio.run(bus.emit_async("e", 7))
    assert sorted(log) == [("Mixed", 7), ("async", 7), ("static", 7)]


def test_dunder_call_can_be_marked() -> None:
    class Callback(Recorder):
        @listens("done")
        def __call__(self, value: int) -> None:
            self.log.append(value)

    bus, log = EventBus(), []
    bus.subscribe(Callback(log))
    bus.emit("done", 3)
    assert log == [3]


def test_a_module_subscribes_its_marked_functions() -> None:
    plugin = types.ModuleType("my_plugin")
    seen: List[Any] = []

    @hookbus.listens("tick")
    def on_tick(n: int) -> None:
        seen.append(n)

    def helper() -> None: ...

    plugin.on_tick = on_tick  # type: ignore[attr-defined]
    plugin.helper = helper  # type: ignore[attr-defined]
    sys.modules["my_plugin"] = plugin
    try:
        bus = EventBus()
        group = bus.subscribe(plugin)
        bus.emit("tick", 3)
        assert seen == [3]
        assert [h.name for h in group] == ["tick"]
        group.remove()
        with pytest.raises(ValueError, match="no hook functions"):
            bus.subscribe(types.ModuleType("empty"))
    finally:
        del sys.modules["my_plugin"]


# --- priorities -------------------------------------------------------------------


def test_class_default_priority_applies_to_methods_without_their_own() -> None:
    class Hooks(Recorder):
        hook_priority = "VERY_LOW"  # mmengine's name

        @listens("step")
        def default(self) -> None:
            self.log.append("default")

        @listens("step", priority=Priority.HIGHEST)
        def own(self) -> None:
            self.log.append("own")

    bus, log = EventBus(), []
    bus.on("step", lambda: log.append("plain"))
    group = bus.subscribe(Hooks(log))
    bus.emit("step")
    assert log == ["own", "plain", "default"]
    assert sorted(h.priority for h in group) == [Priority.VERY_LOW, Priority.HIGHEST]


def test_subscribe_priority_overrides_the_class_default_but_not_the_method() -> None:
    class Hooks:
        hook_priority = "LOW"

        @listens("step")
        def default(self) -> None: ...

        @listens("step", priority=5)
        def own(self) -> None: ...

    group = EventBus().subscribe(Hooks(), priority="high")
    assert {h.hook.__name__: h.priority for h in group if h.hook} == {"default": 20, "own": 5}


def test_an_instance_may_set_its_own_default_priority() -> None:
    class Hooks:
        hook_priority = 0

        def __init__(self, priority: int) -> None:
            self.hook_priority = priority

        @listens("step")
        def run(self) -> None: ...

    bus = EventBus()
    bus.subscribe(Hooks(3))
    bus.subscribe(Hooks(-3))
    assert [h.priority for h in bus.hooks("step")] == [3, -3]


def test_equal_priorities_run_in_definition_order_bases_first() -> None:
    class Base(Recorder):
        @listens("e")
        def first(self) -> None:
            self.log.append("first")

        @listens("e")
        def second(self) -> None:
            self.log.append("second")

    class Child(Base):
        @listens("e")
        def third(self) -> None:
            self.log.append("third")

        def first(self) -> None:  # overridden: keeps its place and its mark
            self.log.append("child first")

    bus, log = EventBus(), []
    bus.subscribe(Child(log))
    bus.emit("e")
    assert log == ["child first", "second", "third"]


def test_a_subclass_can_switch_a_hook_off_or_remark_it() -> None:
    class Base(Recorder):
        @listens("a")
        def on_a(self) -> None:
            self.log.append("a")

        @listens("b")
        def on_b(self) -> None:
            self.log.append("b")

    class Child(Base):
        on_a = None  # type: ignore[assignment]

        @listens("c")
        def on_b(self) -> None:
            self.log.append("b as c")

    bus, log = EventBus(), []
    group = bus.subscribe(Child(log))
    for name in "abc":
        bus.emit(name)
    assert log == ["b as c"]
    assert [h.name for h in group] == ["c"]


# --- declared event sets ----------------------------------------------------------


def test_methods_named_after_declared_events_listen_to_them() -> None:
    class Logger(Recorder):
        hook_events = ("before_run", "after_iter", "after_run")
        hook_priority = "LOW"

        def before_run(self) -> None:
            self.log.append("start")

        def after_iter(self, i: int) -> None:
            self.log.append(i)

        def helper(self) -> None:  # not an event: never registered
            raise AssertionError

    bus, log = EventBus(), []
    group = bus.subscribe(Logger(log))
    bus.emit("before_run")
    bus.emit("after_iter", 1)
    bus.emit("helper")
    assert log == ["start", 1]
    assert [(h.name, h.priority) for h in group] == [("before_run", -20), ("after_iter", -20)]


def test_events_argument_takes_names_or_a_method_to_event_mapping() -> None:
    class Observer(Recorder):
        def update(self, value: int) -> None:
            self.log.append(("update", value))

        def close(self) -> None:
            self.log.append("close")

    bus, log = EventBus(), []
    bus.subscribe(Observer(log), events={"update": "sensor.reading", "close": "sensor.closed"})
    bus.subscribe(Observer(log), events={"close"})
    bus.emit("sensor.reading", 4)
    bus.emit("sensor.closed")
    bus.emit("close")
    assert log == [("update", 4), "close", "close"]


def test_a_marked_method_is_registered_once_even_if_its_name_is_declared() -> None:
    class Hooks(Recorder):
        hook_events = ("save",)

        @listens("save", priority=7)
        def save(self) -> None:
            self.log.append("save")

    bus, log = EventBus(), []
    group = bus.subscribe(Hooks(log))
    bus.emit("save")
    assert log == ["save"]
    assert [h.priority for h in group] == [7]


def test_declared_sets_register_in_a_stable_order() -> None:
    class Hooks(Recorder):
        def b(self) -> None:
            self.log.append("b")

        def a(self) -> None:
            self.log.append("a")

    bus, log = EventBus(), []
    bus.subscribe(Hooks(log), events={"b": "e", "a": "e"})
    bus.subscribe(Hooks(log), events=frozenset({"b", "a"}), priority=-1)
    bus.emit("e")
    bus.emit("a")
    bus.emit("b")
    assert log == ["b", "a", "a", "b"]


# --- weak references and callable objects -----------------------------------------


def test_subscribing_strongly_keeps_the_object_alive() -> None:
    class Hooks(Recorder):
        @listens("e")
        def on_e(self) -> None:
            self.log.append("alive")

    bus, log = EventBus(), []
    bus.subscribe(Hooks(log))
    gc.collect()
    bus.emit("e")
    assert log == ["alive"]


def test_a_weakly_subscribed_object_that_goes_away_unsubscribes_itself() -> None:
    class Hooks(Recorder):
        @listens("e")
        def on_e(self) -> None:
            self.log.append(self.tag)

        @listens("f", kind="post")
        def on_f(self, ctx: hookbus.CallContext) -> None:
            self.log.append(self.tag)

    bus, log = EventBus(), []
    keep = Hooks(log, "kept")
    gone = Hooks(log, "gone")
    bus.subscribe(keep, weak=True)
    group = bus.subscribe(gone, weak=True)
    assert all(handle.weak for handle in group)
    bus.emit("e")
    del gone
    gc.collect()
    bus.emit("e")
    assert log == ["kept", "gone", "kept"]
    assert not group.active
    assert {h.hook for h in bus.hooks()} == {keep.on_e, keep.on_f}


def test_callable_objects_are_plain_hooks() -> None:
    class Multiplier:
        def __init__(self, factor: int) -> None:
            self.factor = factor
            self.seen: List[int] = []

        def __call__(self, value: int) -> int:
            self.seen.append(value)
            return value * self.factor

    bus = EventBus()
    triple = Multiplier(3)
    handle = bus.on("value", triple, priority=1)
    bus.on("value", Multiplier(2))
    assert bus.collect("value", 5) == [15, 10]
    assert triple.seen == [5]
    assert bus.handles_of(triple) == [handle]


def test_a_weak_callable_object_goes_away_with_its_object() -> None:
    class Hook:
        def __init__(self, log: List[int]) -> None:
            self.log = log

        def __call__(self, value: int) -> None:
            self.log.append(value)

    bus, log = EventBus(), []
    hook = Hook(log)
    handle = bus.on("value", hook, weak=True)
    bus.emit("value", 1)
    del hook
    gc.collect()
    bus.emit("value", 2)
    assert log == [1]
    assert not handle.active


def test_a_callable_object_works_as_a_pre_hook() -> None:
    class Clamp:
        def __call__(self, ctx: hookbus.CallContext) -> None:
            ctx.args = (min(ctx.args[0], 10),)

    bus = EventBus()

    @bus.hookable("square")
    def square(x: int) -> int:
        return x * x

    bus.pre("square", Clamp())
    assert square(3) == 9
    assert square(50) == 100


# --- scopes and the default bus ---------------------------------------------------


def test_subscribing_inside_a_scope_is_undone_when_it_closes() -> None:
    class Hooks:
        @listens("e")
        def on_e(self) -> None: ...

    bus = EventBus()
    with bus.scope():
        group = bus.subscribe(Hooks())
        assert group.active
    assert not group.active
    assert bus.hooks() == []


def test_module_level_subscribe_uses_the_default_bus() -> None:
    class Hooks(Recorder):
        @listens("test_subscribe.module_level")
        def on_e(self) -> None:
            self.log.append("heard")

    log: List[str] = []
    with hookbus.subscribe(Hooks(log)) as group:
        hookbus.emit("test_subscribe.module_level")
        assert all(handle.bus is hookbus.default_bus for handle in group)
    hookbus.emit("test_subscribe.module_level")
    assert log == ["heard"]


# --- errors -----------------------------------------------------------------------


def test_subscribing_a_class_instead_of_an_instance_is_refused() -> None:
    class Hooks:
        @listens("e")
        def on_e(self) -> None: ...

    with pytest.raises(TypeError, match=r"takes an instance.*did you mean subscribe\(.*Hooks\(\)"):
        EventBus().subscribe(Hooks)


def test_an_object_without_hook_methods_is_refused() -> None:
    with pytest.raises(ValueError, match=r"object has no hook methods.*@hookbus.listens"):
        EventBus().subscribe(object())


def test_a_marked_generator_method_is_an_around_hook() -> None:
    """pluggy's wrapper=True implementation, in its plugin class: kind="around"."""
    bus = EventBus()
    log: List[str] = []

    @bus.hookable("load")
    def load(path: str) -> str:
        return path.upper()

    class Plugin:
        @listens("formats")
        def formats(self) -> str:
            return "csv"

        @listens("formats", kind="around")
        def wrap_formats(self, ctx: Any) -> Any:
            try:
                yield
            finally:
                log.append("teardown")
            ctx.result = [name.upper() for name in ctx.result]

        @listens("load", kind="around")
        def wrap_load(self, ctx: Any) -> Any:
            ctx.args = (ctx.args[0] + ".txt",)
            yield

    plugin = bus.subscribe(Plugin())
    assert bus.collect("formats") == ["CSV"]
    assert load("a") == "A.TXT"
    assert log == ["teardown"]
    assert sorted(h.kind for h in plugin) == ["around", "around", "event"]
    plugin.remove()
    assert bus.collect("formats") == []
    with pytest.raises(TypeError, match="generator"):  # an around hook must yield
        bus.subscribe(
            type("Bad", (), {"f": listens("formats", kind="around")(lambda s, ctx: 1)})()
        )
    assert bus.hooks() == []


def test_the_refusal_says_list_the_events_not_declare_them() -> None:
    """ "Declare" is @bus.event's word; hook_events lists the events methods are named after.

    A class whose methods are named after declared events needs them listed: the
    message says how, without sending the reader to @bus.event.
    """
    bus = EventBus()

    @bus.event
    def before_run(runner: object) -> None: ...

    class Logger:
        def before_run(self, runner: object) -> None: ...

    for obj in (Logger(), types.ModuleType("plugin")):
        with pytest.raises(ValueError, match="list the events") as refused:
            bus.subscribe(obj)
        message = str(refused.value).split(" has no ", 1)[1]  # after the object's name
        assert "declare" not in message
        assert "list the events" in message
        assert "hook_events" in message


def test_a_declared_set_that_matches_no_method_names_the_near_misses() -> None:
    class Typo:
        hook_events = ("after_train_iter", "before_run")

        def after_train_itr(self) -> None: ...

    with pytest.raises(ValueError, match=r"'after_train_itr' \(did you mean 'after_train_iter'"):
        EventBus().subscribe(Typo())


@pytest.mark.parametrize(
    ("events", "error", "message"),
    [
        ("before_run", TypeError, r"got str 'before_run'.*\('before_run',\)"),
        (42, TypeError, r"collection of event names.*got int 42"),
        (["train.step"], ValueError, r"'train.step' can't be a method name.*mapping"),
        ({"run": ""}, ValueError, r"non-empty string"),
    ],
)
def test_bad_declared_events_are_refused(events: Any, error: type, message: str) -> None:
    class Hooks:
        def run(self) -> None: ...

    with pytest.raises(error, match=message):
        EventBus().subscribe(Hooks(), events=events)


def test_a_bad_class_priority_names_the_attribute() -> None:
    class Hooks:
        hook_priority = "URGENT"

        @listens("e")
        def on_e(self) -> None: ...

    with pytest.raises(ValueError, match=r"Hooks.hook_priority: unknown priority name 'URGENT'"):
        EventBus().subscribe(Hooks())


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"event": "e", "kind": "wrapper"}, ValueError, r"unknown hook kind 'wrapper'.*'around'"),
        ({"event": "e", "priority": 1.5}, TypeError, r"priority must be an int"),
        ({"event": "e", "once": 1}, TypeError, r"once=\) takes True or False"),
        ({"event": ""}, ValueError, r"event name must be a non-empty string"),
        ({"event": 3}, TypeError, r"event name must be a str"),
    ],
)
def test_listens_checks_its_arguments_where_it_is_written(
    kwargs: Any, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        listens(**kwargs)


def test_listening_twice_to_the_same_name_is_refused() -> None:
    with pytest.raises(ValueError, match=r"already listens to event 'e'"):

        class Hooks:  # pyright: ignore[reportUnusedClass]
            @listens("e")
            @listens("e")
            def on_e(self) -> None: ...


def test_listens_on_a_non_callable_is_refused() -> None:
    with pytest.raises(TypeError, match=r"needs a method, got int"):
        listens("e")(3)


def test_a_failing_registration_leaves_nothing_registered() -> None:
    bus = EventBus()

    @bus.hookable("sync_point")
    def sync_point() -> None: ...

    class Hooks:
        @listens("fine")
        def first(self) -> None: ...

        @listens("sync_point", kind="pre")
        async def async_pre(self, ctx: hookbus.CallContext) -> None: ...

    with pytest.raises(TypeError, match="async"):
        bus.subscribe(Hooks())
    assert bus.hooks() == []


def test_weak_subscription_of_an_unreferenceable_object_leaves_nothing_registered() -> None:
    class Slotted:
        __slots__ = ()

        @listens("a")
        def on_a(self) -> None: ...

        @listens("b")
        def on_b(self) -> None: ...

    bus = EventBus()
    with pytest.raises(TypeError, match="weak"):
        bus.subscribe(Slotted(), weak=True)
    assert bus.hooks() == []


def test_class_attributes_that_answer_every_getattr_are_not_hooks() -> None:
    class Anything:
        def __getattr__(self, name: str) -> str:
            return "yes"

    class Hooks:
        proxy = Anything()

        @listens("e")
        def on_e(self) -> None: ...

    group = EventBus().subscribe(Hooks())
    assert [h.name for h in group] == ["e"]


def test_subscribing_the_same_object_twice_is_refused() -> None:
    class Plugin:
        @hookbus.listens("tick")
        def tick(self) -> None: ...

    bus = EventBus()
    plugin = Plugin()
    bus.subscribe(plugin)
    with pytest.raises(ValueError, match="already registered"):
        bus.subscribe(plugin)
    assert len(bus.hooks()) == 1


# --- listening to a declared event -----------------------------------------------------------


def test_listens_takes_a_declared_event_and_the_bus_checks_the_method() -> None:
    bus = EventBus()
    seen: List[Any] = []

    @bus.event
    def order_paid(order_id: int, *, amount: float = 0.0) -> None: ...

    class Mailer:
        @listens(order_paid, priority="HIGH")
        def receipt(self, order_id: int, *, amount: float = 0.0) -> None:
            seen.append(("receipt", order_id, amount))

        @listens(order_paid)
        @staticmethod
        def count(order_id: int, *, amount: float = 0.0) -> None:
            seen.append(("count", order_id))

    class Broken:
        @listens(order_paid)  # type: ignore[arg-type]
        def receipt(self, order: int) -> None: ...

    bus.subscribe(Mailer())
    order_paid.emit(7, amount=9.5)
    assert seen == [("receipt", 7, 9.5), ("count", 7)]
    with pytest.raises(TypeError, match="does not accept what event 'order_paid' passes"):
        bus.subscribe(Broken())


def test_listens_to_a_declared_event_takes_event_hooks_only() -> None:
    bus = EventBus()

    @bus.event
    def order_paid(order_id: int) -> None: ...

    with pytest.raises(ValueError, match="on or around hooks only"):
        listens(order_paid, kind="post")  # type: ignore[call-overload]
