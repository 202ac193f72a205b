"""``ctx.skip`` under ``torch.jit.trace``: the trace records what the eager call does."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import hookbus
import hookbus.torch

pytestmark = pytest.mark.torch


@pytest.mark.xfail(
    strict=True,
    reason="ctx.skip under torch.jit.trace is ignored silently: the traced module runs the "
    "forward the pre hook skipped",
)
def test_a_skip_in_a_pre_hook_is_what_a_traced_module_does() -> None:
    """Decided: traced correctly, not refused. torch bakes every forward hook's effect into
    a trace (a post hook's replaced output included); a skip is such an effect, so the
    traced module returns the skip's value, as the eager call does."""
    model = nn.Sequential(nn.Linear(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    value = torch.full((1, 2), 7.0)
    net.pre("0", lambda ctx: ctx.skip(value))
    x = torch.ones(1, 2)
    assert torch.equal(model(x), value)  # eager: skipped
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the trace warns that the output is a constant
        traced = torch.jit.trace(model, x, check_trace=False)
    net.detach()
    assert torch.equal(traced(x), value)
