"""Gradient hooks (``on_grad``, ``on_accumulated_grad``): what torch does, or refused."""

from __future__ import annotations

from typing import Dict

import pytest
import torch
from torch import nn

import hookbus.torch
from hookbus import CallContext

pytestmark = pytest.mark.torch


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(3, 1)


def test_an_optimizer_step_in_backward_matches_torch_s_own_post_accumulate_hook() -> None:
    """The "optimizer step in backward" pattern the docstring names: each parameter steps
    and zeroes its gradient inside its hook. The weights must follow torch's own
    ``register_post_accumulate_grad_hook`` exactly, and the gradient stay cleared."""
    native, hooked = _model(), _model()
    native_steps: Dict[torch.Tensor, torch.optim.Optimizer] = {
        p: torch.optim.Adam([p], lr=0.1) for p in native.parameters()
    }
    hooked_steps: Dict[torch.Tensor, torch.optim.Optimizer] = {
        p: torch.optim.Adam([p], lr=0.1) for p in hooked.parameters()
    }

    def native_step(parameter: torch.Tensor) -> None:
        native_steps[parameter].step()
        native_steps[parameter].zero_grad()

    def hooked_step(ctx: CallContext) -> None:
        hooked_steps[ctx.target].step()
        hooked_steps[ctx.target].zero_grad()

    handles = []
    for parameter in native.parameters():
        parameter.register_post_accumulate_grad_hook(native_step)
    for parameter in hooked.parameters():
        handles.append(hookbus.torch.on_accumulated_grad(parameter, hooked_step))
    x = torch.randn(4, 3)
    for _ in range(5):
        native(x).pow(2).sum().backward()
        hooked(x).pow(2).sum().backward()
    for handle in handles:
        handle.remove()
    assert hooked.weight.grad is None
    assert torch.equal(hooked.weight, native.weight)
    assert torch.equal(hooked.bias, native.bias)


def test_on_grad_refuses_a_tensor_that_does_not_require_grad() -> None:
    """Decided: raise (ValueError, as on_accumulated_grad refuses such a tensor), not warn.
    torch's ``register_hook`` raises here; a hook that can never run is a silent miss, and a
    warning is easy to filter away. The message names the tensor's state."""
    with torch.no_grad():
        made_without_grad = torch.ones(2, requires_grad=True) * 2
    with pytest.raises(ValueError, match="requires_grad"):
        hookbus.torch.on_grad(made_without_grad, lambda ctx: None)


def test_a_gradient_the_hook_sets_on_the_parameter_itself_is_kept() -> None:
    """A hook that assigns ``parameter.grad`` directly (clipping in place of the
    accumulated gradient, say) keeps what it assigned, as with torch's own hook, over
    several backward passes."""
    native, hooked = _model(), _model()

    def native_halve(parameter: torch.Tensor) -> None:
        parameter.grad = parameter.grad * 0.5

    def hooked_halve(ctx: CallContext) -> None:
        ctx.target.grad = ctx.target.grad * 0.5

    handles = []
    for parameter in native.parameters():
        parameter.register_post_accumulate_grad_hook(native_halve)
    for parameter in hooked.parameters():
        handles.append(hookbus.torch.on_accumulated_grad(parameter, hooked_halve))
    x = torch.randn(4, 3)
    for _ in range(3):
        native(x).pow(2).sum().backward()
        hooked(x).pow(2).sum().backward()
    for handle in handles:
        handle.remove()
    assert native.weight.grad is not None
    assert hooked.weight.grad is not None
    assert torch.allclose(hooked.weight.grad, native.weight.grad, atol=1e-6, rtol=0)
    assert torch.allclose(hooked.bias.grad, native.bias.grad, atol=1e-6, rtol=0)
