"""Operation points (``net.operations``): names that exist, and calls counted right.

An operation point is named by the call index of its operation within one forward of
the selected module. Only names that a forward calls are hook points, and only the
forward's own calls are counted: a hook that calls the same torch function must not
shift the numbering, or an ablation would edit the wrong tensor.
"""

from __future__ import annotations

from typing import Any, List

import pytest
import torch
from torch import nn

import hookbus
import hookbus.torch
from hookbus import CallContext

pytestmark = pytest.mark.torch


class TwoTanh(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(2):
            x = torch.tanh(x)
        return x


@pytest.mark.xfail(
    strict=True,
    reason="a hook on an operation call index the discovery forward did not reach "
    "('loop:tanh.3') is accepted and never fires",
)
def test_a_hook_on_a_call_index_the_forward_never_reached_is_refused() -> None:
    """After the discovery forward the points are known: ``tanh.3`` of a forward that calls
    ``tanh`` twice is a typo, refused with the names that exist, as a module typo is."""
    model = nn.Sequential()
    model.add_module("loop", TwoTanh())
    net = hookbus.torch.attach(model, hookbus.EventBus())
    selection = net.operations("loop", torch.tanh)
    model(torch.ones(2))  # the discovery forward
    assert selection.names == ["loop:tanh.0", "loop:tanh.1"]
    with pytest.raises(ValueError, match=r"loop:tanh\.1"):
        net.pre("loop:tanh.3", lambda ctx: None)
    net.detach()


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.inner(x))


@pytest.mark.xfail(
    strict=True,
    reason="torch calls made by a module hook inside a selected module are counted as the "
    "forward's own: the operation points are renumbered and an ablation edits the wrong "
    "tensor",
)
def test_torch_calls_of_a_module_hook_do_not_renumber_the_forward_s_operations() -> None:
    """A logging hook on a submodule that calls ``torch.tanh`` must not become ``tanh.0``:
    the ablation registered on ``tanh.0`` edits the forward's own tanh, whatever the
    hooks of its submodules compute."""
    torch.manual_seed(0)
    model = nn.Sequential(Block())
    net = hookbus.torch.attach(model, hookbus.EventBus())
    net.operations("0", torch.tanh)
    x = torch.ones(1, 2)
    model(x)  # the discovery forward

    def ablate(ctx: CallContext) -> None:
        ctx.args = (torch.zeros_like(ctx.args[0]), *ctx.args[1:])

    logged: List[Any] = []
    net.pre("0:tanh.0", ablate)
    net.post("0.inner", lambda ctx: logged.append(torch.tanh(ctx.result).sum().item()))
    out = model(x)
    assert torch.equal(out, torch.zeros(1, 2))  # tanh(0): the forward's tanh was ablated
    assert len(logged) == 1
    net.detach()
