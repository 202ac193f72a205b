"""``every_module()``: a point nothing holds any more lets go of its bus."""

from __future__ import annotations

import gc
import weakref

import pytest

import hookbus
import hookbus.torch

pytestmark = pytest.mark.torch


@pytest.mark.xfail(
    strict=True,
    reason="a dropped every_module(bus) point keeps its bus, and all its hooks hold, alive "
    "for the life of the process",
)
def test_a_dropped_every_module_point_lets_its_bus_be_collected() -> None:
    """A bus made for one job (a test, a request) and given to ``every_module`` must go
    when the job drops it, as a bus with an attached model does."""
    bus = hookbus.EventBus()
    bus_alive = weakref.ref(bus)
    every = hookbus.torch.every_module(bus)
    handle = every.post(lambda ctx: None)
    handle.remove()  # no hook left: torch's global hooks are out
    del every, handle, bus
    gc.collect()
    assert bus_alive() is None
