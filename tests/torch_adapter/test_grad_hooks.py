"""Gradient hooks: a module's output gradients (``grad``), a tensor's (``on_grad``), and
torch's post-accumulate-grad hook behind hookbus's shape (``on_accumulated_grad``); each
does what torch does, or is refused."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List

import pytest
import torch
from torch import nn
from torch_helpers import TutorialNet

import hookbus
import hookbus.torch
from hookbus import CallContext

pytestmark = pytest.mark.torch


# --- a module's output gradients: grad ----------------------------------------------------


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    hidden: Any


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> Output:
        h = self.lin(x)
        return Output(logits=h * 2, hidden={"h": h, "pair": (h + 1, 7)})


def test_grad_hooks_on_nested_outputs_with_paths() -> None:
    model = Nested()
    attached = hookbus.torch.attach(model, hookbus.EventBus())
    seen: Dict[Any, torch.Tensor] = {}

    def keep(ctx: CallContext) -> None:
        seen[ctx.data["path"]] = ctx.result

    attached.grad("<root>", keep)
    out = model(torch.ones(1, 2))
    (out.logits.sum() + out.hidden["h"].sum() * 3 + out.hidden["pair"][0].sum() * 5).backward()
    assert {path: g.tolist() for path, g in seen.items()} == {
        ("logits",): [[1.0, 1.0]],
        ("hidden", "h"): [[10.0, 10.0]],  # 3 directly, 2 through logits, 5 through pair
        ("hidden", "pair", 0): [[5.0, 5.0]],
    }


def test_grad_hook_replaces_the_gradient_flowing_on() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
    attached = hookbus.torch.attach(model, hookbus.EventBus())
    model(torch.ones(1, 2)).sum().backward()
    plain = model[0].weight.grad.clone()
    model.zero_grad()

    def double(ctx: CallContext) -> None:
        ctx.result = ctx.result * 2

    with attached.grad("0", double):
        model(torch.ones(1, 2)).sum().backward()
    assert torch.allclose(model[0].weight.grad, 2 * plain)


def test_grad_hooks_skip_outputs_under_no_grad() -> None:
    model = TutorialNet()
    attached = hookbus.torch.attach(model, hookbus.EventBus())
    seen: List[Any] = []
    attached.grad("fc1", lambda ctx: seen.append(ctx))
    with torch.no_grad():
        model(torch.ones(1, 2))  # no error: nothing to hook
    with torch.inference_mode():
        model(torch.ones(1, 2))
    assert seen == []
    with torch.no_grad():
        frozen = torch.ones(2) * 2
    with pytest.raises(ValueError, match="requires_grad"):
        hookbus.torch.on_grad(frozen, lambda ctx: None)


# --- a parameter's accumulated gradient: on_accumulated_grad ------------------------------


def test_the_hook_sees_the_accumulated_gradient_once_per_backward() -> None:
    weight = torch.nn.Parameter(torch.ones(3))
    seen: List[Any] = []

    def record(ctx: Any) -> None:
        seen.append((ctx.phase, ctx.call_index, ctx.target is weight, ctx.result.tolist()))

    handle = hookbus.torch.on_accumulated_grad(weight, record, name="w")
    (weight * 2).sum().backward()
    (weight * 3).sum().backward()  # accumulates onto the first
    assert seen == [
        ("accumulated_grad", 0, True, [2.0, 2.0, 2.0]),
        ("accumulated_grad", 1, True, [5.0, 5.0, 5.0]),
    ]
    handle.remove()
    (weight * 1).sum().backward()
    assert len(seen) == 2
    assert not handle.active


def test_assigning_the_result_replaces_the_parameters_grad() -> None:
    model = torch.nn.Linear(2, 1)
    expected = torch.nn.Linear(2, 1)
    expected.load_state_dict(model.state_dict())
    x = torch.randn(4, 2)

    def halve(ctx: Any) -> None:
        ctx.result = ctx.result / 2

    for parameter in model.parameters():
        hookbus.torch.on_accumulated_grad(parameter, halve)
    model(x).sum().backward()
    expected(x).sum().backward()
    for got, want in zip(model.parameters(), expected.parameters()):
        assert torch.allclose(got.grad, want.grad / 2, atol=1e-6)


def test_a_non_leaf_tensor_is_refused_saying_what_to_use() -> None:
    x = torch.ones(2, requires_grad=True) * 2
    with pytest.raises(ValueError, match=r"leaf tensor.*on_grad\(\)"):
        hookbus.torch.on_accumulated_grad(x, lambda ctx: None)


def test_a_hook_that_returns_a_value_is_refused() -> None:
    weight = torch.nn.Parameter(torch.ones(1))
    hookbus.torch.on_accumulated_grad(weight, lambda ctx: ctx.result)
    with pytest.raises(TypeError, match="returned Tensor, not None"):
        weight.sum().backward()


# --- on_grad and on_accumulated_grad: what torch does, or refused -------------------------


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
