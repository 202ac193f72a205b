"""``patch(positions=...)``: every output shape a capture takes, patching keeps."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import torch
from torch import nn

import hookbus.torch

pytestmark = pytest.mark.torch

Output = collections.namedtuple("Output", "hidden attention")


class ReturnsNamedTuple(nn.Module):
    def forward(self, x: torch.Tensor) -> Output:
        return Output(x * 2, x * 3)


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


class ReturnsMax(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return torch.max(x, dim=-1)  # a torch.return_types.max: values and indices


def test_patching_positions_keeps_a_torch_return_type_output() -> None:
    """A structseq output (``torch.max(..., dim=)``) keeps its type and its field names, with
    the positions patched in each of its tensors as in raw torch indexing."""
    model = nn.Sequential(ReturnsMax())
    clean = torch.arange(12.0).reshape(1, 3, 4)
    corrupt = -clean
    with hookbus.torch.capture(model, "0") as cache:
        clean_out = model(clean)
    with hookbus.torch.patch(model, cache, "0", positions=[1]):
        out = model(corrupt)
    expected_values = torch.max(corrupt, dim=-1).values.clone()
    expected_values[:, 1] = clean_out.values[:, 1]
    expected_indices = torch.max(corrupt, dim=-1).indices.clone()
    expected_indices[:, 1] = clean_out.indices[:, 1]
    assert type(out) is type(clean_out)
    assert torch.allclose(out.values, expected_values, atol=1e-6, rtol=0)
    assert torch.equal(out.indices, expected_indices)
