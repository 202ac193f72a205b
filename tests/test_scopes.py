"""Scopes: everything registered while a scope is open is removed when it closes, even on error."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import warnings
from typing import Any, List

import pytest
from async_helpers import LazyEvent, run

from hookbus import EventBus


def test_scope_removes_everything_registered_inside_even_on_error() -> None:
    bus = EventBus()
    outside = bus.on("keep", print)

    def fail_inside() -> None:
        with bus.scope():
            bus.on("a", print)

            @bus.hookable("f")
            def f() -> None:
                pass

            bus.pre("f", print)
            bus.post("f.*", print)
            raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        fail_inside()
    assert bus.hooks() == [outside]


def test_scopes_nest() -> None:
    bus = EventBus()
    with bus.scope():
        outer = bus.on("outer", print)
        with bus.scope():
            inner = bus.on("inner", print)
        assert not inner.active
        assert outer.active
    assert not outer.active


def test_scope_registration_methods_work_from_another_thread() -> None:
    bus = EventBus()
    with bus.scope() as scope:
        thread = threading.Thread(target=lambda: scope.on("from-thread", print))
        thread.start()
        thread.join()
        # A plain registration in another thread does not join this thread's scope...
        other = threading.Thread(target=lambda: bus.on("not-scoped", print))
        other.start()
        other.join()
        assert bus.events() == ["from-thread", "not-scoped"]
    assert bus.events() == ["not-scoped"]


def test_scope_captures_only_its_own_bus() -> None:
    one, two = EventBus(), EventBus()
    with one.scope():
        one.on("a", print)
        two.on("b", print)
    assert one.hooks() == []
    assert [h.name for h in two.hooks()] == ["b"]


def test_scope_is_per_asyncio_task() -> None:
    bus = EventBus()

    async def register_in_task() -> None:
        bus.on("from-task", print)

    async def main() -> None:
        with bus.scope():
            await asyncio.create_task(register_in_task())  # a child task copies the context
            assert bus.events() == ["from-task"]
        assert bus.events() == []

    asyncio.run(main())


def test_scope_cannot_be_entered_twice() -> None:
    bus = EventBus()
    scope = bus.scope()
    with scope, pytest.raises(RuntimeError, match="already open"), scope:
        pass


def test_a_scope_never_entered_warns_that_it_removes_nothing() -> None:
    """bus.scope() without ``with`` collected nothing, silently: it warns when dropped."""
    bus = EventBus()
    scope = bus.scope()  # the mistake: no with
    bus.on("e", print)
    scope.remove()
    with pytest.warns(RuntimeWarning, match=r"never entered.*with bus\.scope\(\)"):
        del scope
    assert len(bus.hooks()) == 1  # it collected nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # entered, or used through scope.on: no warning
        with bus.scope():
            pass
        used = bus.scope()
        used.on("e", repr)
        used.remove()
        del used
    assert len(bus.hooks()) == 1


def test_decorator_registered_inside_a_scope_is_removed() -> None:
    bus = EventBus()
    with bus.scope():

        @bus.on("e")
        def react() -> None:
            pass

        assert len(bus.handles_of(react)) == 1
    assert bus.handles_of(react) == []


def test_cancellation_inside_a_scope_removes_its_hooks() -> None:
    bus = EventBus()
    started = LazyEvent()

    async def task_body() -> None:
        with bus.scope():
            bus.on("e", print)
            started.set()
            await asyncio.Event().wait()

    async def main() -> None:
        task = asyncio.ensure_future(task_body())
        await started.wait()
        assert len(bus.hooks()) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert bus.hooks() == []


def test_scope_opened_in_one_task_does_not_capture_another_tasks_hooks() -> None:
    bus = EventBus()
    inside = LazyEvent()
    done = LazyEvent()

    async def scoped() -> None:
        with bus.scope():
            bus.on("scoped", print)
            inside.set()
            await done.wait()

    async def other() -> None:
        await inside.wait()
        bus.on("other", print)
        done.set()

    async def main() -> None:
        await asyncio.gather(scoped(), other())

    run(main())
    assert bus.events() == ["other"]


# --- a scope exited somewhere else ------------------------------------------------------


def _in_thread(action: Any) -> List[BaseException]:
    errors: List[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=10)
    return errors


def test_a_scope_exited_in_another_thread_closes_cleanly() -> None:
    bus = EventBus()
    scope = bus.scope()
    scope.__enter__()
    inside = bus.on("inside", print)
    assert _in_thread(lambda: scope.__exit__(None, None, None)) == []
    assert not inside.active
    assert not scope.active
    # The thread that entered it no longer registers into the closed scope...
    after = bus.on("after", print)
    scope.remove()
    assert after.active
    # ...and its scopes work as before.
    with bus.scope():
        later = bus.on("later", print)
    assert not later.active
    assert after.active


def test_registrations_after_an_inner_scope_closed_elsewhere_join_the_outer_one() -> None:
    bus = EventBus()
    with bus.scope():
        inner = bus.scope()
        inner.__enter__()
        bus.on("inner", print)
        assert _in_thread(lambda: inner.__exit__(None, None, None)) == []
        outer_hook = bus.on("outer", print)
        assert outer_hook.active
        assert [h.name for h in bus.hooks()] == ["outer"]
    assert bus.hooks() == []


def test_a_scope_exited_in_another_task_closes_cleanly() -> None:
    bus = EventBus()

    async def main() -> None:
        scope = bus.scope()
        scope.__enter__()
        inside = bus.on("inside", print)
        # Another task runs in a copy of this context: its reset would fail there.
        await asyncio.create_task(_exit_async(scope))
        assert not inside.active
        after = bus.on("after", print)
        scope.remove()
        assert after.active

    asyncio.run(main())
    assert [h.name for h in bus.hooks()] == ["after"]


async def _exit_async(scope: Any) -> None:
    scope.__exit__(None, None, None)


def test_a_scope_closed_elsewhere_can_be_entered_again_in_its_thread() -> None:
    bus = EventBus()
    scope = bus.scope()
    scope.__enter__()
    assert _in_thread(lambda: scope.__exit__(None, None, None)) == []
    with scope:
        again = bus.on("again", print)
    assert not again.active
    stray = bus.on("stray", print)
    scope.remove()
    assert stray.active  # the first opening, closed elsewhere, did not come back


def test_an_outer_scope_exited_before_its_inner_one_leaves_the_inner_one_open() -> None:
    bus = EventBus()
    outer, inner = bus.scope(), bus.scope()
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)
    late = bus.on("late", print)  # joins the inner scope, still open
    inner.__exit__(None, None, None)
    assert not late.active
    after = bus.on("after", print)  # joins nothing
    outer.remove()
    inner.remove()
    assert after.active


def test_a_scope_collects_registrations_made_in_its_context_copied_to_another_thread() -> None:
    bus = EventBus()
    with bus.scope() as scope:
        context = contextvars.copy_context()
        worker = threading.Thread(target=context.run, args=(bus.on, "copied", print))
        worker.start()
        worker.join(timeout=10)
        assert len(scope) == 1
    assert bus.hooks() == []
    bus.on("after", print)  # every scope closed: it joins none
    assert [handle.name for handle in bus.hooks()] == ["after"]
