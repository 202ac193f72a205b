"""Plans and the point seam: a hook point hears of changes after the lock is released, asks
the registry for its plan, and never keeps a plan that hooks changed under.

A point of the seam's shape (kinds, is_async, invalidate) is told of every change that
reaches its name with no bus lock held; a point that fails to take a hook undoes the
registration, all or nothing.
"""

from __future__ import annotations

import threading
from typing import List

import pytest

from hookbus import CallContext, EventBus


class RecordingPoint:
    """A hook point of the seam's shape that registers on the bus when told of a change."""

    kinds = ("pre", "post", "exception")
    is_async = False

    def __init__(self, bus: EventBus, name: str) -> None:
        self.bus = bus
        self.name = name
        self.plans: List[object] = []

    def invalidate(self) -> None:
        # Under the bus lock, this would deadlock: the lock is not reentrant.
        if not self.plans:
            self.bus.on("side.effect", print)
        self.plans.append(self.bus.registry.plan(self))


def _in_thread(action: object, timeout: float = 10.0) -> None:
    errors: List[BaseException] = []

    def run() -> None:
        try:
            action()  # type: ignore[operator]
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "deadlocked: a point was called under the bus lock"
    assert not errors, errors


def test_a_point_is_told_of_changes_with_no_lock_held_and_gets_its_plan() -> None:
    bus = EventBus()
    point = RecordingPoint(bus, "load")
    bus.registry.add_point(point)

    def hook(ctx: CallContext) -> None:
        pass

    _in_thread(lambda: bus.post("load", hook))
    assert [h.name for h in bus.hooks(kind="event")] == ["side.effect"]
    plan = point.plans[-1]
    assert plan is not None
    assert [h.hook for h in plan.post] == [hook]  # type: ignore[attr-defined]
    _in_thread(bus.clear)
    assert point.plans[-1] is None  # no hook applies any more


def test_a_point_that_fails_to_take_a_hook_undoes_the_registration() -> None:
    bus = EventBus()

    class Refusing(RecordingPoint):
        def invalidate(self) -> None:
            plan = self.bus.registry.plan(self)
            if plan is not None:
                raise RuntimeError("cannot install")

    point = Refusing(bus, "load")
    bus.registry.add_point(point)
    with pytest.raises(RuntimeError, match="cannot install"):
        bus.pre("load", lambda ctx: None)
    assert bus.hooks() == []  # all or nothing
    with bus.scope(), pytest.raises(RuntimeError):
        bus.post("l*", lambda ctx: None)
    assert bus.hooks() == []


def test_a_plan_worked_out_while_hooks_change_is_not_kept() -> None:
    # Points hear of changes after the lock is released, so a call may work out
    # its plan just before a registration lands: that plan must not stay cached.
    bus = EventBus()
    seen: List[str] = []

    @bus.hookable("load")
    def load() -> str:
        return "data"

    point = load.__hookbus_point__  # type: ignore[attr-defined]
    registry = bus.registry
    original = registry.plan

    def plan_then_register(target: object) -> object:
        plan = original(target)  # type: ignore[arg-type]
        registry.plan = original  # type: ignore[method-assign]
        bus.post("load", lambda ctx: seen.append("late"))  # lands after the plan was made
        return plan

    registry.plan = plan_then_register  # type: ignore[assignment,method-assign]
    assert load() == "data"  # this call ran the plan it worked out: no hooks
    assert seen == []
    assert repr(point) == "<HookPoint 'load' unresolved>"  # not the stale plan
    load()
    assert seen == ["late"]
