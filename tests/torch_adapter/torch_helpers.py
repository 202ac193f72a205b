"""Models and checks shared by the torch tests."""

from __future__ import annotations

from typing import Dict

import torch
from torch import nn


class TutorialNet(nn.Module):
    """The classic hook tutorial's 2-layer net, every weight and bias set to 1."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, 2)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(2, 1)
        self.relu6 = nn.ReLU6()
        with torch.no_grad():
            for parameter in self.parameters():
                parameter.fill_(1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu6(self.fc2(self.relu(self.fc1(x))))


def native_hooks(model: nn.Module) -> Dict[str, int]:
    """How many native hooks each module holds, for modules that hold any."""
    counts = {}
    for name, module in model.named_modules():
        count = (
            len(module._forward_hooks)
            + len(module._forward_pre_hooks)
            + len(module._backward_hooks)
            + len(module._backward_pre_hooks)
        )
        if count:
            counts[name] = count
    return counts


def hook_state(model: nn.Module) -> Dict[str, tuple]:
    """Everything hook-related torch keeps on each module, to compare before and after."""
    return {
        name: (
            dict(module._forward_hooks),
            dict(module._forward_pre_hooks),
            dict(module._backward_hooks),
            dict(module._backward_pre_hooks),
            dict(module._forward_hooks_with_kwargs),
            dict(module._forward_hooks_always_called),
            dict(module._forward_pre_hooks_with_kwargs),
            module._is_full_backward_hook,
        )
        for name, module in model.named_modules()
    }
