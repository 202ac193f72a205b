"""``every_module()``: a point nothing holds any more lets go of its bus."""

from __future__ import annotations

import gc
import weakref
from typing import List

import pytest
import torch
from torch import nn

import hookbus
import hookbus.torch

pytestmark = pytest.mark.torch


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


def test_a_dropped_every_module_point_with_a_hook_runs_it_until_the_hook_goes() -> None:
    """Dropped while a hook matches it, the point lives on (torch's global hooks hold it)
    and runs the hook; with the last hook removed, it lets go of its bus."""
    bus = hookbus.EventBus()
    bus_alive = weakref.ref(bus)
    calls: List[str] = []
    every = hookbus.torch.every_module(bus)
    handle = every.post(lambda ctx: calls.append(type(ctx.target).__name__))
    del every
    gc.collect()
    nn.ReLU()(torch.ones(1))
    assert calls == ["ReLU"]
    handle.remove()
    del handle, bus
    gc.collect()
    assert bus_alive() is None


def test_every_module_takes_over_a_dropped_point_that_still_has_hooks() -> None:
    """A second point of one name would run each hook twice: ``every_module(bus)`` takes
    the live one over, and its ``remove()`` takes torch's global hooks out."""
    bus = hookbus.EventBus()
    calls: List[str] = []
    hookbus.torch.every_module(bus).post(lambda ctx: calls.append("bus hook"))
    gc.collect()
    every = hookbus.torch.every_module(bus)
    nn.ReLU()(torch.ones(1))
    assert calls == ["bus hook"]
    every.remove()
    nn.ReLU()(torch.ones(1))
    assert calls == ["bus hook"]
