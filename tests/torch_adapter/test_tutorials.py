"""The classic torch hook tutorials, reproduced exactly through hookbus."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest
import torch
from torch import nn
from torch_helpers import TutorialNet, native_hooks

import hookbus
import hookbus.torch
from hookbus import CallContext


def test_captured_inputs_and_outputs_equal_what_forward_returns() -> None:
    net = TutorialNet()
    x = torch.tensor([[0.1, 0.1], [0.1, 0.1]])
    bus = hookbus.EventBus()
    seen: Dict[str, Dict[str, Any]] = {}

    def record(ctx: CallContext) -> None:
        seen[ctx.name] = {"input": ctx.args[0], "output": ctx.result}

    with hookbus.torch.attach(net, bus) as attached:
        attached.post(["fc1", "relu", "fc2"], record)  # every child but ReLU6
        out = net(x)

    fc1 = net.fc1(x)
    relu = net.relu(fc1)
    fc2 = net.fc2(relu)
    assert torch.allclose(fc1, torch.full((2, 2), 1.2))
    assert torch.allclose(fc2, torch.full((2, 1), 3.4))
    assert torch.allclose(out, torch.full((2, 1), 3.4))
    expected = {
        "fc1": (x, fc1),
        "relu": (fc1, relu),
        "fc2": (relu, fc2),
    }
    assert list(seen) == ["fc1", "relu", "fc2"]
    for name, (inp, outp) in expected.items():
        assert torch.equal(seen[name]["input"] - inp, torch.zeros_like(inp))
        assert torch.equal(seen[name]["output"] - outp, torch.zeros_like(outp))
    assert native_hooks(net) == {}


def _xyz() -> Any:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = torch.tensor([3.0, 4.0], requires_grad=True)
    z = ((y - x) ** 2).mean()
    return x, y, z


def test_gradient_hook_on_z_doubles_the_gradients() -> None:
    x, y, z = _xyz()

    def double(ctx: CallContext) -> None:
        ctx.result = ctx.result * 2

    handle = hookbus.torch.on_grad(z, double)
    assert handle.active
    z.backward()
    assert x.grad.tolist() == [-4.0, -4.0]
    assert y.grad.tolist() == [4.0, 4.0]


def test_without_the_hook_the_gradients_are_the_plain_ones() -> None:
    x, y, z = _xyz()
    handle = hookbus.torch.on_grad(z, lambda ctx: None)
    handle.remove()
    assert not handle.active
    z.backward()
    assert x.grad.tolist() == [-2.0, -2.0]
    assert y.grad.tolist() == [2.0, 2.0]


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(3, 4)
        self.fc2 = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


def _fc2_weight_grad(model: MLP) -> torch.Tensor:
    model.zero_grad()
    torch.manual_seed(1)
    model(torch.randn(5, 3)).sum().backward()
    assert model.fc2.weight.grad is not None
    return model.fc2.weight.grad.clone()


def test_doubling_fc2s_output_doubles_its_weight_gradient() -> None:
    model = MLP()
    plain = _fc2_weight_grad(model)
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(model, bus)

    def double(ctx: CallContext) -> None:
        ctx.result = ctx.result * 2

    with bus.post("fc2", double):
        doubled = _fc2_weight_grad(model)
    assert torch.equal(doubled, 2 * plain)
    assert torch.equal(_fc2_weight_grad(model), plain)  # the hook is gone
    attached.detach()


def test_forward_pre_hook_sees_the_input_shape() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
    bus = hookbus.EventBus()
    shapes: List[torch.Size] = []
    with hookbus.torch.attach(model, bus) as attached:
        attached.pre(nn.Conv2d, lambda ctx: shapes.append(ctx.args[0].shape))
        model(torch.zeros(2, 3, 10, 10))
    assert shapes == [torch.Size([2, 3, 10, 10])]


def test_inplace_relu_changes_what_an_earlier_post_hook_stored() -> None:
    # The documented trap: fc's output is stored by reference, then ReLU(inplace=True)
    # overwrites that very tensor. clone=True keeps the value as it was.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True))
    x = torch.randn(8, 4)
    with hookbus.torch.capture(model, "0") as by_ref:
        model(x)
    with hookbus.torch.capture(model, "0", clone=True) as cloned:
        model(x)
    assert (by_ref["0"].output >= 0).all()  # what the hook saw was changed afterwards
    assert (cloned["0"].output < 0).any()  # the real pre-ReLU values
    assert torch.equal(cloned["0"].output.clamp(min=0), by_ref["0"].output)


def test_inplace_relu_hook_sees_its_input_overwritten() -> None:
    relu = nn.ReLU(inplace=True)
    model = nn.Sequential(relu)
    x = torch.tensor([-1.0, 2.0])
    seen: Dict[str, Any] = {}

    def look(ctx: CallContext) -> None:
        seen["same"] = ctx.args[0] is ctx.result or ctx.args[0].data_ptr() == ctx.result.data_ptr()
        seen["input"] = ctx.args[0].clone()

    with hookbus.torch.attach(model, hookbus.EventBus()) as attached:
        attached.post(relu, look)
        model(x)
    assert seen["same"]  # input and output are one tensor
    assert seen["input"].tolist() == [0.0, 2.0]  # the post hook sees the input already clamped
    assert x.tolist() == [0.0, 2.0]


def test_full_backward_hook_fails_with_a_following_inplace_op_grad_hook_does_not() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(inplace=True))
    x = torch.randn(2, 3, requires_grad=True)
    with hookbus.torch.attach(model, hookbus.EventBus()) as attached:
        with (
            attached.backward("0", lambda ctx: None),
            pytest.raises(RuntimeError, match="inplace"),
        ):
            model(x).sum().backward()
        grads: List[torch.Tensor] = []
        with attached.grad("0", lambda ctx: grads.append(ctx.result)):
            model(x).sum().backward()
        assert len(grads) == 1
        assert grads[0].shape == (2, 3)
