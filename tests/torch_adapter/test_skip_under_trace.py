"""``ctx.skip`` under ``torch.jit.trace``: the trace records what the eager call does."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import hookbus
import hookbus.torch

pytestmark = pytest.mark.torch


def test_a_skip_in_a_pre_hook_is_what_a_traced_module_does() -> None:
    """Decided: traced correctly, not refused. torch bakes every forward hook's effect into
    a trace (a post hook's replaced output included); a skip is such an effect, so the
    traced module returns the skip's value, as the eager call does. (A module after the
    skipped one: torch refuses to trace a model whose output is a bare constant, a plain
    forward hook's as well.)"""
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
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


def test_a_skip_computed_from_the_input_is_traced_as_that_computation() -> None:
    """A skip whose value is computed from the module's input (``x * 3`` instead of the
    layer) traces as that computation: the traced model applies it to new inputs, as raw
    torch code doing the same computes it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    net.pre("0", lambda ctx: ctx.skip(ctx.args[0] * 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(model, torch.ones(1, 2))
    net.detach()
    y = torch.randn(4, 2)
    assert torch.allclose(traced(y), model[1](y * 3), atol=1e-6, rtol=0)
    assert not torch.allclose(model(y), model[1](y * 3))  # the hook is gone: not skipped
