"""Models and checks shared by the torch tests."""

from __future__ import annotations

from typing import Any, Dict

import pytest
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


class SmallNet(nn.Module):
    """A hand-written model: Linear(4, 8), ReLU, Linear(8, 2), named inp, act, out."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.out = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.inp(x)))


def tiny_gpt2(**config: Any) -> nn.Module:
    """A random Hugging Face GPT2LMHeadModel, 2 layers of width 32, seed 0, eval mode.

    No download: built from a tiny config (``config`` overrides its fields). The
    test is skipped where transformers is not installed.
    """
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    fields: Dict[str, Any] = dict(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64)
    fields.update(config)
    model: nn.Module = transformers.GPT2LMHeadModel(transformers.GPT2Config(**fields)).eval()
    return model


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


class Block(nn.Module):
    """A transformer-shaped block: attn, then mlp, each a Linear(2, 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.Linear(2, 2)
        self.mlp = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.attn(x))


class Encoder(nn.Module):
    """Two Blocks in a ModuleList, then a LayerNorm: layers.0.attn ... layers.1.mlp, norm."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])
        self.norm = nn.LayerNorm(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class Scaled(nn.Module):
    """forward(x, scale=1.0, *, shift=0.0) -> x * scale + shift; counts its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor, scale: float = 1.0, *, shift: float = 0.0) -> torch.Tensor:
        self.calls += 1
        return x * scale + shift


class Counted(nn.Module):
    """A block that counts its forward calls (a child too, to see that it doesn't run)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(3, 3)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.tanh(self.inner(x)) + x


class CountedNet(nn.Module):
    """embed (Linear(2, 3)), block (a Counted), head (Linear(3, 1))."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(2, 3)
        self.block = Counted()
        self.head = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.embed(x)))


def hand_skipped(model: nn.Module, module: nn.Module, value: Any, x: Any) -> Any:
    """The hand-written way: replace the instance's forward, call, restore."""
    module.forward = lambda *args, **kwargs: value(*args) if callable(value) else value
    try:
        return model(x)
    finally:
        del module.forward
