"""Module names on the bus: a name under a module's path that names no module is a typo."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hookbus
import hookbus.torch

pytestmark = pytest.mark.torch


@pytest.mark.xfail(
    strict=True,
    reason="a name that starts with a module's path and a dot but names no submodule "
    "('0.weigth_typo') is accepted on the bus and never fires",
)
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
