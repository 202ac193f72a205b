"""``bus.wrap(model)``: ``ctx.arguments`` names ``forward``'s parameters (issue 20, item 15)."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

torch = pytest.importorskip("torch")

import hookbus  # noqa: E402

pytestmark = pytest.mark.torch


def test_arguments_of_a_wrapped_module_are_its_forwards() -> None:
    class Scale(torch.nn.Module):
        def forward(self, x: Any, factor: float = 2.0) -> Any:
            return x * factor

    bus = hookbus.EventBus()
    model = bus.wrap(Scale(), "scale")
    seen: List[Dict[str, Any]] = []

    def halve(ctx: hookbus.CallContext) -> None:
        seen.append({name: type(value).__name__ for name, value in ctx.arguments.items()})
        ctx.arguments["factor"] = 0.5

    bus.pre("scale", halve)
    out = model(torch.ones(2))
    assert torch.equal(out, torch.full((2,), 0.5))
    assert seen == [{"x": "Tensor", "factor": "float"}]
