"""Gradients of intermediate tensors, without ``retain_grad``, and changing them.

Shows:
* ``hookbus.torch.on_grad(tensor, hook)``: the gradient of a non-leaf tensor,
  delivered to ``hook(ctx)`` in ``ctx.result`` at backward, with no
  ``retain_grad()`` call;
* ``capture(model, ..., grads=True)``: the gradient of every selected module's
  output, checked against ``torch.autograd.grad``;
* modifying a gradient: assigning ``ctx.result`` in a gradient hook (here,
  scaling one layer's output gradient) changes every gradient upstream of it,
  and exactly as the chain rule says.

Run it: ``python examples/gradient_capture.py``
"""

from __future__ import annotations

from typing import Dict, List

import torch
from torch import nn

import hookbus
import hookbus.torch


def non_leaf_gradient() -> None:
    x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    h = x * 2  # a non-leaf tensor: autograd normally forgets its gradient
    seen: List[torch.Tensor] = []
    handle = hookbus.torch.on_grad(h, lambda ctx: seen.append(ctx.result))
    (h**2).sum().backward()
    assert torch.equal(seen[0], 2 * h.detach())  # d(sum h^2)/dh = 2h
    assert not h.retains_grad  # nothing was retained on the tensor itself
    assert torch.equal(x.grad, 2 * 2 * h.detach())  # and x's gradient is unchanged
    handle.remove()
    print("d loss / d h =", seen[0].tolist())


def model_gradients() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    x = torch.randn(6, 3)

    # What autograd says, computed directly.
    hidden = model[1](model[0](x))
    loss = model[2](hidden).pow(2).mean()
    (expected,) = torch.autograd.grad(loss, hidden)

    with hookbus.torch.capture(model, nn.Tanh, grads=True) as cache:
        model(x).pow(2).mean().backward()
    assert torch.allclose(cache["1"].grad, expected, atol=1e-6)
    print("captured the gradient of", cache["1"].name, tuple(cache["1"].grad.shape))


def modified_gradient() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    x = torch.randn(6, 3)

    def grads() -> Dict[str, torch.Tensor]:
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    model(x).sum().backward()
    baseline = grads()
    model.zero_grad()

    bus = hookbus.EventBus("grads")
    with hookbus.torch.attach(model, bus) as net:

        def scale(ctx: hookbus.CallContext) -> None:
            ctx.result = ctx.result * 0.5  # what flows back into the Tanh and below

        net.grad("1", scale)
        model(x).sum().backward()
    scaled = grads()

    # Upstream of the Tanh output (the first Linear): exactly half.
    for name in ("0.weight", "0.bias"):
        assert torch.allclose(scaled[name], baseline[name] * 0.5, atol=1e-6), name
    # Downstream (the last Linear) never saw the hook.
    for name in ("2.weight", "2.bias"):
        assert torch.equal(scaled[name], baseline[name]), name
    print("first layer's gradient halved, last layer's untouched")


def main() -> None:
    torch.manual_seed(0)
    non_leaf_gradient()
    model_gradients()
    modified_gradient()
    print("gradient capture example: ok")


if __name__ == "__main__":
    main()
