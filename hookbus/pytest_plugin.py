"""The hookbus pytest plugin: bus fixtures, and a recorder with readable assertions.

Installed with hookbus (the ``pytest11`` entry point ``hookbus``), so every test
can ask for:

* ``event_bus``: a fresh :class:`~hookbus.EventBus`, cleared after the test;
* ``default_bus``: :data:`hookbus.default_bus`, isolated: whatever the test
  registers on it (``hookbus.on``, ``@hookbus.pre``, ``hookbus.subscribe``...) is
  gone after the test, and what it removed is back;
* ``bus_recorder``: a :class:`BusRecorder` of the default bus (and of ``event_bus``
  when the test uses it too, and of the application's buses that the
  ``hookbus_buses`` fixture lists), with assertion helpers.

To isolate the default bus in every test without asking for the fixture, set
``hookbus_isolate_default_bus = true`` in the ``[pytest]`` ini section (or
``[tool.pytest.ini_options]``). Disable the plugin with ``-p no:hookbus``.

This module is imported by every pytest run once hookbus is installed: it
imports only pytest and the hookbus core, never torch.
"""

from __future__ import annotations

import contextlib
from typing import Generator, Iterator, List, Sequence, cast

import pytest

import hookbus
from hookbus._bus import EventBus
from hookbus._recorder import BusRecorder, Occurrence

__all__ = [
    "BusRecorder",
    "Occurrence",
    "bus_recorder",
    "default_bus",
    "event_bus",
    "hookbus_buses",
    "isolate",
]

BusRecord = Occurrence
"""The name :class:`Occurrence` had first (kept so that imports of it still work)."""

# --- isolating a bus ----------------------------------------------------------------


@contextlib.contextmanager
def isolate(bus: EventBus) -> Generator[EventBus, None, None]:
    """Undo, on exit, every change to a bus's hooks made while open.

    Hooks registered meanwhile are removed, hooks removed meanwhile (``clear()``,
    ``once`` hooks that fired) come back, and the error policy, pauses and trace
    are as they were. Other threads' changes are undone too. A hook that can never
    run again stays out: one held weakly, or with a weakly held ``target``, whose
    object was collected meanwhile. What the restore lets go of goes with the bus
    lock released, as after ``remove()`` (a finalizer may use the bus). The
    ``default_bus`` fixture is this, around one test, on :data:`hookbus.default_bus`.

    Example:
        >>> import hookbus
        >>> from hookbus.pytest_plugin import isolate
        >>> bus = hookbus.EventBus()
        >>> kept = bus.on("a", print)
        >>> with isolate(bus):
        ...     added = bus.on("b", print)
        ...     bus.clear()
        >>> [h.name for h in bus.hooks()], kept.active, added.active
        (['a'], True, False)
    """
    snapshot = bus.registry.snapshot()
    try:
        yield bus
    finally:
        bus.registry.restore(snapshot)


# --- the plugin ---------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the ``hookbus_isolate_default_bus`` ini option."""
    parser.addini(
        "hookbus_isolate_default_bus",
        type="bool",
        default=False,
        help="hookbus: isolate hookbus.default_bus in every test, as the default_bus fixture does",
    )


@pytest.fixture
def event_bus(request: pytest.FixtureRequest) -> Iterator[EventBus]:
    """A fresh :class:`~hookbus.EventBus` named after the test, cleared afterwards.

    Example:
        >>> def test_saving_notifies(event_bus):
        ...     seen = []
        ...     event_bus.on("saved", seen.append)
        ...     event_bus.emit("saved", "a.txt")
        ...     assert seen == ["a.txt"]
    """
    bus = hookbus.EventBus(str(request.node.name))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    yield bus
    bus.clear()


@pytest.fixture
def default_bus() -> Iterator[EventBus]:
    """:data:`hookbus.default_bus`, with every change the test makes to it undone after.

    Example:
        >>> import hookbus
        >>> def test_module_level_hooks_do_not_leak(default_bus):
        ...     hookbus.on("saved", print)
        ...     assert len(default_bus.hooks("saved")) == 1
    """
    with isolate(hookbus.default_bus) as bus:
        yield bus


@pytest.fixture
def hookbus_buses() -> List[EventBus]:
    """The application's own buses, which ``bus_recorder`` records too: none unless overridden.

    An application that keeps its buses in its own modules names them once, by
    overriding this fixture in its ``conftest.py``.

    Example:
        >>> import pytest, hookbus
        >>> orders = hookbus.EventBus("orders")  # in the application's own module
        >>> @pytest.fixture
        ... def hookbus_buses():  # in conftest.py
        ...     return [orders]
        >>> def test_paying_emits(bus_recorder):
        ...     orders.emit("order.paid", 7)
        ...     bus_recorder.assert_emitted_with("order.paid", 7)
    """
    return []


@pytest.fixture
def bus_recorder(
    request: pytest.FixtureRequest, default_bus: EventBus, hookbus_buses: List[EventBus]
) -> Iterator[BusRecorder]:
    """A :class:`BusRecorder` of the (isolated) default bus, of ``event_bus`` if used, and of
    the application's buses that :func:`hookbus_buses` lists.

    Example:
        >>> import hookbus
        >>> def test_training_loop(bus_recorder):
        ...     for step in range(3):
        ...         hookbus.emit("train.after_iter", step=step)
        ...     bus_recorder.assert_emitted("train.after_iter", times=3)
        ...     bus_recorder.assert_emitted_with("train.after_iter", step=2)
    """
    buses = [default_bus]
    if "event_bus" in request.fixturenames:
        buses.append(request.getfixturevalue("event_bus"))
    buses += _checked_buses(hookbus_buses)
    with BusRecorder(*buses) as recorder:
        yield recorder


def _checked_buses(found: object) -> List[EventBus]:
    """What an overridden ``hookbus_buses`` returned, if it is a list of buses."""
    kind = type(found).__name__
    items: Sequence[object] = (
        cast("Sequence[object]", found) if isinstance(found, (list, tuple)) else [found]
    )
    if not all(isinstance(bus, EventBus) for bus in items):
        raise TypeError(
            f"the hookbus_buses fixture must return a list of EventBus, got "
            f"{kind}; for example 'return [myapp.events.bus]'"
        )
    return [bus for bus in items if isinstance(bus, EventBus)]


@pytest.fixture(autouse=True)
def _hookbus_isolate_default_bus(request: pytest.FixtureRequest) -> None:
    """Isolate the default bus in every test when the ini option asks for it."""
    if request.config.getini("hookbus_isolate_default_bus"):
        request.getfixturevalue("default_bus")
