"""What a hookbus.torch post hook costs per call, built up step by step.

Four ``nn.Identity`` modules (so that the hook call dominates), each with one
native forward hook; the extra time per hook call over the bare modules is
compared with a native no-op hook's. Each step adds one piece of what the
adapter's post dispatcher does, and the last is the adapter itself.

    python benchmarks/torch_hook_breakdown.py
"""

from __future__ import annotations

import itertools
import os
import sys
from typing import Any, Callable, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness
import _torch_cases
import torch
from _harness import Case, absolute, run_rounds
from torch import nn

import hookbus
import hookbus.torch
from hookbus import CallContext

MODULES = 4


def _noop(ctx: Any) -> None:
    return None


class Dispatcher:
    """Native post hooks doing more and more of the adapter's work."""

    def __init__(self) -> None:
        self.name = "m"
        self.calls = itertools.count()
        self.hooks = (_noop,)

    def call_only(self, module: Any, args: Any, output: Any) -> None:
        for hook in self.hooks:
            hook(output)

    def context_by_class(self, module: Any, args: Any, output: Any) -> None:
        ctx = CallContext(self.name, module, args, {}, 0, "post")
        ctx._result = output
        for hook in self.hooks:
            hook(ctx)

    def context_fast(self, module: Any, args: Any, output: Any) -> None:
        ctx = CallContext.for_call(self.name, module, args, {}, 0, "post", self)
        ctx._result = output
        for hook in self.hooks:
            hook(ctx)

    def context_full(self, module: Any, args: Any, output: Any) -> Any:
        # What the adapter's post dispatcher does.
        ctx = CallContext.for_call(self.name, module, args, {}, next(self.calls), "post", self)
        ctx._result = output
        for hook in self.hooks:
            if hook(ctx) is not None:
                raise TypeError("a hook returned a value")
        result = ctx._result
        return None if result is output else result


def _native(module: Any, args: Any, output: Any) -> None:
    return None


def main() -> None:
    _harness.clock = _harness.CLOCKS["cpu"]
    torch.set_num_threads(1)
    x = torch.randn(32, 64)

    def build(make: Optional[Callable[[], Any]]) -> nn.Module:
        model = nn.Sequential(*[nn.Identity() for _ in range(MODULES)])
        if make is not None:
            for module in model:
                module.register_forward_hook(make())
        return model

    models: Dict[str, nn.Module] = {
        "no hooks": build(None),
        "native no-op hook (floor)": build(lambda: _native),
        "dispatcher calling the hook": build(lambda: Dispatcher().call_only),
        "+ CallContext(...) per call": build(lambda: Dispatcher().context_by_class),
        "+ CallContext.for_call(...) instead": build(lambda: Dispatcher().context_fast),
        "+ call index, return check, result": build(lambda: Dispatcher().context_full),
    }
    adapted = nn.Sequential(*[nn.Identity() for _ in range(MODULES)])
    attachment = hookbus.torch.attach(adapted, hookbus.EventBus())
    attachment.post(nn.Identity, _noop)
    models["hookbus.torch post hook"] = adapted
    cases: List[Case] = [
        Case(f"hook/{label}", "forward()", {"forward": _torch_cases._Forward(model, x)})
        for label, model in models.items()
    ]
    run_rounds(cases, rounds=41, sample_s=0.01)
    none = absolute(cases[0]).median
    native = (absolute(cases[1]).median - none) / MODULES
    print("| Per hook call | Extra time | Ratio to native |")
    print("|---|---:|---:|")
    for case in cases[1:]:
        extra = (absolute(case).median - none) / MODULES
        print(f"| {case.key.split('/', 1)[1]} | {extra:.0f} ns | {extra / native:.2f}x |")


if __name__ == "__main__":
    main()
