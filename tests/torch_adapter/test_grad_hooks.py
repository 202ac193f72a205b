"""``on_accumulated_grad``: torch's post-accumulate-grad hook behind hookbus's shape (issue 22)."""

from __future__ import annotations

from typing import Any, List

import pytest

torch = pytest.importorskip("torch")

import hookbus.torch  # noqa: E402

pytestmark = pytest.mark.torch


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
