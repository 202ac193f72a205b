"""The torch part of ``python -m hookbus.demo``: capture, modify, and a gradient."""

from __future__ import annotations

from typing import Any, List, Optional, cast

import torch
from torch import nn

from .. import CallContext, EventBus
from ._attach import attach
from ._capture import capture
from ._grad import on_grad

__all__ = ["tour"]


class _Net(nn.Module):
    """The classic 2-layer hook tutorial net."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, 2)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(2, 1)
        self.relu6 = nn.ReLU6()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.relu6(self.fc2(self.relu(self.fc1(x))))
        return out


def _small_net() -> _Net:
    net = _Net()
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.fill_(1.0)
    return net


def tour() -> None:
    """Print the torch tour: capture features, modify an output, capture a gradient.

    Example:
        >>> tour()  # doctest: +ELLIPSIS
        capture(net, ["fc1", "relu", "fc2"], inputs=True):
        ...
    """
    net = _small_net()
    x = torch.full((2, 2), 0.1)

    print('capture(net, ["fc1", "relu", "fc2"], inputs=True):')
    with capture(net, ["fc1", "relu", "fc2"], inputs=True) as cache:
        out = net(x)
    for name, record in cache.items():
        print(f"  {name:5} input {_row(record.args[0])} -> output {_row(record.output)}")
    # What forward returns, step by step, must equal what the hooks saw.
    fc1 = net.fc1(x)
    expected = {"fc1": fc1, "relu": torch.relu(fc1), "fc2": net.fc2(torch.relu(fc1))}
    same = all(torch.equal(cache[name].output, value) for name, value in expected.items())
    print(f"  captured == forward's own tensors: {same}; net(x) = {out[0].item():.1f}")

    bus = EventBus("demo-torch")
    with attach(net, bus) as attached:

        def halve(ctx: CallContext) -> None:
            ctx.result = ctx.result / 2

        with attached.post("fc2", halve):
            print(f"a post hook halving fc2's output: net(x) = {net(x)[0].item():.1f}")
        print(f"after the with block: net(x) = {net(x)[0].item():.1f}, hooks left: {bus.hooks()}")

        grads: List[torch.Tensor] = []

        def keep(ctx: CallContext) -> None:
            grads.append(ctx.result)

        with attached.grad("fc1", keep):
            _backward(net(x).sum())
        print(f"gradient reaching fc1's output (row 0): {_row(grads[0])}")

    x1 = torch.tensor([1.0, 2.0], requires_grad=True)
    y1 = torch.tensor([3.0, 4.0], requires_grad=True)
    z = ((y1 - x1) ** 2).mean()

    def double(ctx: CallContext) -> None:
        ctx.result = ctx.result * 2

    on_grad(z, double)
    _backward(z)
    print(f"on_grad(z, double): x.grad = {_row(x1.grad)}, y.grad = {_row(y1.grad)}")
    print(f"native hooks left on the net: {_native_hooks(net)}")


def _row(tensor: Optional[torch.Tensor]) -> List[float]:
    """The first row (or the values of a 1-d tensor), rounded for printing."""
    if tensor is None:
        return []
    row = tensor[0] if tensor.dim() > 1 else tensor
    values: List[float] = cast(Any, row).tolist()
    return [round(value, 4) for value in values]


def _backward(tensor: torch.Tensor) -> None:
    cast(Any, tensor).backward()  # untyped in torch


def _native_hooks(net: nn.Module) -> int:
    return sum(
        len(module._forward_hooks) + len(module._forward_pre_hooks) + len(module._backward_hooks)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        for module in net.modules()
    )
