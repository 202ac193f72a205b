"""``isolate()`` (the ``default_bus`` fixture): restoring a snapshot is as safe as removing.

Restore lets go of hooks and targets as every other removal does (after the lock is
released, so a finalizer may use the bus), and brings back only hooks that could run.
"""

from __future__ import annotations

import gc
import threading
from typing import Any, Callable, List

from hookbus import EventBus
from hookbus.pytest_plugin import isolate


def _lock_probe(bus: EventBus, blocked: List[bool]) -> Callable[[], None]:
    """Ask the bus for its hooks from another thread, with a timeout: a finalizer run
    under the bus lock sees the other thread blocked (and no deadlock)."""

    def probe() -> None:
        other = threading.Thread(target=bus.hooks, daemon=True)
        other.start()
        other.join(1.0)
        blocked.append(other.is_alive())

    return probe


def test_restore_lets_go_of_a_strongly_held_target_with_the_lock_released() -> None:
    """A target that cannot be weakly referenced is held strongly by its hook's handle;
    when restore drops a handle whose weak hook died during the block, the target's
    finalizer may use the bus, as after ``handle.remove()``."""
    bus = EventBus()
    blocked: List[bool] = []

    class Sender:  # no __weakref__: held strongly as a target
        __slots__ = ("on_delete",)

        def __del__(self) -> None:
            self.on_delete()

    class Hook:
        def __call__(self, *args: Any) -> None:
            pass

    hook = Hook()
    sender = Sender()
    sender.on_delete = _lock_probe(bus, blocked)
    bus.on("ping", hook, weak=True, target=sender)
    del sender
    with isolate(bus):
        del hook  # the weak hook dies during the block; its handle waits in the snapshot
        gc.collect()
    gc.collect()
    assert blocked == [False]


def test_restore_does_not_bring_back_a_hook_whose_target_died_during_the_block() -> None:
    """A hook whose weakly held target was collected can never fire again; restore already
    leaves out a weak hook whose own object died, and treats a dead target alike."""
    bus = EventBus()

    class Sender:
        pass

    def hook(sender: Any) -> None:
        pass

    sender = Sender()
    handle = bus.on("ping", hook, target=sender)
    with isolate(bus):
        del sender
        gc.collect()
        assert bus.hooks() == []
    assert bus.hooks() == []
    assert not handle.active
