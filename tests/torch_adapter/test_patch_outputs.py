"""``patch(positions=...)``: every output shape a capture takes, patching keeps."""

from __future__ import annotations

import collections

import pytest
import torch
from torch import nn

import hookbus.torch

pytestmark = pytest.mark.torch

Output = collections.namedtuple("Output", "hidden attention")


class ReturnsNamedTuple(nn.Module):
    def forward(self, x: torch.Tensor) -> Output:
        return Output(x * 2, x * 3)


@pytest.mark.xfail(
    strict=True,
    reason="patch(positions=...) on a module that returns a namedtuple raises TypeError on "
    "every forward",
)
def test_patching_positions_keeps_a_namedtuple_output() -> None:
    """Many models return namedtuples; patching some positions must return the same
    namedtuple type with those positions replaced, as for a tuple."""
    model = nn.Sequential(ReturnsNamedTuple())
    with hookbus.torch.capture(model, "0") as cache:
        model(torch.ones(1, 3, 2))
    with hookbus.torch.patch(model, cache, "0", positions=[0]):
        out = model(torch.zeros(1, 3, 2))
    assert type(out) is Output
    assert out.hidden[0, :, 0].tolist() == [2.0, 0.0, 0.0]
    assert out.attention[0, :, 0].tolist() == [3.0, 0.0, 0.0]
