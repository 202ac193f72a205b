"""Module names on the bus: a name under a module's path that names no module is a typo."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hookbus
import hookbus.torch

pytestmark = pytest.mark.torch


def test_a_child_name_that_no_module_has_is_refused_on_the_bus() -> None:
    """``net.post`` refuses it; ``bus.post`` must too, with the close names: a module's path
    followed by a child it does not have is a typo, not a hook point to come."""
    model = nn.Sequential(nn.Linear(2, 2))
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    with pytest.raises(ValueError, match=r"0\.weigth_typo"):
        bus.post("0.weigth_typo", lambda ctx: None)
    assert bus.hooks() == []
    model(torch.ones(1, 2))
    net.detach()


@pytest.mark.parametrize("name", ["1.3", "1.0.weight", "1.0.x.y", "<root>.typo"])
def test_a_descendant_that_no_module_has_is_refused_at_any_depth(name: str) -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Linear(2, 2)))
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    with pytest.raises(ValueError, match=f"no module named {name!r}"):
        bus.pre(name, lambda ctx: None)
    assert bus.hooks() == []
    net.detach()


def test_a_child_name_under_an_attachment_s_prefix_is_refused() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus, prefix="encoder")
    for name in ("encoder.0.weigth_typo", "0.weigth_typo"):
        with pytest.raises(ValueError, match="no module named"):
            bus.post(name, lambda ctx: None)
    assert bus.hooks() == []
    net.detach()


def test_optional_accepts_a_child_name_that_no_module_has() -> None:
    """``optional=True`` says the name may never be a point: it is accepted as ever."""
    model = nn.Sequential(nn.Linear(2, 2))
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    handle = bus.post("0.weigth_typo", lambda ctx: None, optional=True)
    assert handle.active
    handle.remove()
    net.detach()


def test_a_dotted_name_under_no_module_stays_a_point_to_come() -> None:
    """A name whose leading part is no module (a function point declared later, say) is
    not the model's: it is accepted, as before."""
    model = nn.Sequential(nn.Linear(2, 2))
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    handle = bus.post("trainer.step_done", lambda ctx: None)
    assert handle.active
    handle.remove()
    net.detach()
