"""Feature extraction: intermediate activations of a small CNN and an MLP.

Shows:
* ``hookbus.torch.capture(model, selector)``: record module outputs (and, with
  ``inputs=True``, their inputs) while a block runs, selecting modules by type, by
  glob pattern over their qualified names, or by object;
* a module called twice in one forward: one record, two calls;
* ``hookbus.torch.attach`` plus an ordinary ``bus.post`` hook that edits an
  activation (ablating a channel) and changes the model's output;
* each captured value checked against the same computation done by hand, and the
  model's own hook dicts left empty afterwards.

Run it: ``python examples/feature_extraction.py``
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

import hookbus
import hookbus.torch


class MLP(nn.Module):
    """Two hidden layers; the second is the same module applied twice."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.hidden = nn.Linear(8, 8)
        self.out = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.inp(x))
        h = torch.tanh(self.hidden(h))
        h = torch.tanh(self.hidden(h))  # weight sharing: a second call of the same layer
        return self.out(h)


def no_hooks_left(model: nn.Module) -> bool:
    return all(
        not m._forward_hooks and not m._forward_pre_hooks and not m._backward_hooks
        for m in model.modules()
    )


def cnn_features() -> None:
    cnn = nn.Sequential(
        nn.Conv2d(1, 4, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 10),
    )
    x = torch.randn(2, 1, 8, 8)

    with hookbus.torch.capture(cnn, [nn.Conv2d, nn.MaxPool2d, "4"]) as cache:
        logits = cnn(x)
    assert list(cache) == ["0", "2", "4"]

    conv, linear = cnn[0], cnn[4]
    by_hand = F.conv2d(x, conv.weight, conv.bias, padding=1)
    assert torch.allclose(cache["0"].output, by_hand, atol=1e-6)
    pooled = F.max_pool2d(F.relu(by_hand), 2)
    assert torch.allclose(cache["2"].output, pooled, atol=1e-6)
    assert torch.allclose(
        cache["4"].output, F.linear(pooled.flatten(1), linear.weight, linear.bias)
    )
    assert torch.equal(cache["4"].output, logits.detach())
    assert not cache["0"].output.requires_grad  # stored detached, by default

    # Ablation: zero channel 1 of the conv's output with a post hook on a bus.
    bus = hookbus.EventBus("cnn")
    with hookbus.torch.attach(cnn, bus):

        def ablate(ctx: hookbus.CallContext) -> None:
            out = ctx.result.clone()
            out[:, 1] = 0
            ctx.result = out

        with bus.post("0", ablate):
            ablated = cnn(x)
        masked = by_hand.clone()
        masked[:, 1] = 0
        manual = F.linear(F.max_pool2d(F.relu(masked), 2).flatten(1), linear.weight, linear.bias)
        assert torch.allclose(ablated, manual, atol=1e-6)
        assert not torch.allclose(ablated, logits)
    assert no_hooks_left(cnn)
    print(f"CNN: conv {tuple(cache['0'].output.shape)} -> logits {tuple(logits.shape)}")


def mlp_features() -> None:
    mlp = MLP()
    x = torch.randn(5, 4)

    with hookbus.torch.capture(mlp, ["inp", "hid*"], inputs=True) as cache:
        mlp(x)
    assert list(cache) == ["inp", "hidden"]
    assert len(cache["hidden"]) == 2  # two calls of one module

    h1 = torch.tanh(x @ mlp.inp.weight.T + mlp.inp.bias)
    pre2 = h1 @ mlp.hidden.weight.T + mlp.hidden.bias
    pre3 = torch.tanh(pre2) @ mlp.hidden.weight.T + mlp.hidden.bias
    first, second = cache["hidden"].outputs
    assert torch.allclose(torch.tanh(cache["inp"].output), h1, atol=1e-6)
    assert torch.allclose(first, pre2, atol=1e-6)
    assert torch.allclose(second, pre3, atol=1e-6)
    # With inputs=True the first argument of each call is there too.
    assert torch.allclose(cache["hidden"].calls[0].args[0], h1, atol=1e-6)
    assert torch.allclose(cache["hidden"].calls[1].args[0], torch.tanh(pre2), atol=1e-6)
    assert no_hooks_left(mlp)
    print(f"MLP: hidden layer called {len(cache['hidden'])} times, outputs {tuple(first.shape)}")


def main() -> None:
    torch.manual_seed(0)
    cnn_features()
    mlp_features()
    print("feature extraction example: ok")


if __name__ == "__main__":
    main()
