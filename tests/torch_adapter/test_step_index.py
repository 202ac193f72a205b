"""``steps().index``: every hook of a step reads that step's index, whenever it was made.

``steps(model)`` counts the model's top-level forwards with a forward pre hook. Hooks
that torch runs before that one (the model's own pre hooks registered before the
block, and every global module pre hook) must read the index of the call they are in.
"""

from __future__ import annotations

from typing import List

import pytest
import torch
from torch import nn

import hookbus
import hookbus.torch
from hookbus import CallContext

pytestmark = pytest.mark.torch


def test_a_pre_hook_registered_before_the_block_reads_the_step_of_its_call() -> None:
    """``only(start=1)`` means "from the first generated token": a pre hook of the model that
    existed before the block must see step 0 on the first forward, not -1."""
    model = nn.Sequential(nn.Linear(2, 2))
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    seen: List[int] = []
    holder: List[hookbus.torch.steps] = []
    net.pre("<root>", lambda ctx: seen.append(holder[0].index))
    with hookbus.torch.steps(model) as step:
        holder.append(step)
        for _ in range(3):
            model(torch.ones(1, 2))
    assert seen == [0, 1, 2]
    net.detach()


def test_only_from_step_one_fires_from_step_one_in_every_module_pre_hooks() -> None:
    """torch runs global pre hooks before a module's own: they must read the same index."""
    model = nn.Sequential(nn.Linear(2, 2))
    fired: List[int] = []
    every = hookbus.torch.every_module(hookbus.EventBus())
    with every, hookbus.torch.steps(model) as step:

        def on_model(ctx: CallContext) -> None:
            if ctx.target is model:
                fired.append(step.index)

        every.pre(step.only(on_model, start=1))
        for _ in range(3):
            model(torch.ones(1, 2))
    assert fired == [1, 2]


def test_every_hook_of_a_call_reads_its_step_whatever_runs_first() -> None:
    """A plain torch pre hook and a bus pre hook registered before the block, two
    ``every_module`` points (made after the block began) and a post hook: all read the
    step of the call they are in, and the call is counted once."""
    model = nn.Sequential(nn.Linear(2, 2))
    bus, other_bus = hookbus.EventBus(), hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    seen: List[tuple] = []
    holder: List[hookbus.torch.Steps] = []
    plain = model.register_forward_pre_hook(lambda m, a: seen.append(("plain", holder[0].index)))
    net.pre("<root>", lambda ctx: seen.append(("pre", holder[0].index)))
    with hookbus.torch.steps(model) as step:
        holder.append(step)
        every = hookbus.torch.every_module(bus)
        other = hookbus.torch.every_module(other_bus)
        for name, point in (("every", every), ("other", other)):

            def read(ctx: CallContext, name: str = name) -> None:
                if ctx.target is model:
                    seen.append((name, step.index))

            point.pre(read)
        net.post("<root>", lambda ctx: seen.append(("post", step.index)))
        for _ in range(2):
            model(torch.ones(1, 2))
        every.remove()
        other.remove()
        model(torch.ones(1, 2))
    plain.remove()
    net.detach()
    order = ["every", "other", "plain", "pre", "post"]
    assert seen == [(name, i) for i in range(2) for name in order] + [
        ("plain", 2),
        ("pre", 2),
        ("post", 2),
    ]


def test_a_call_stopped_by_an_every_module_pre_hook_counts_once() -> None:
    """A call that an ``every_module`` pre hook stopped still started: it counts, as a call
    stopped by the model's own pre hook does; the next calls count one each, whether or
    not the every-module point is still there."""
    model = nn.Sequential(nn.Linear(2, 2))
    seen: List[int] = []
    with hookbus.torch.steps(model) as step:
        every = hookbus.torch.every_module(hookbus.EventBus())

        def stop_the_first(ctx: CallContext) -> None:
            if ctx.target is model and step.index == 0:
                raise ValueError("stopped")

        every.pre(stop_the_first)
        with pytest.raises(ValueError, match="stopped"):
            model(torch.ones(1, 2))
        model(torch.ones(1, 2))
        seen.append(step.index)
        step.index = -1  # as at a generate(): the next call is step 0, stopped again
        with pytest.raises(ValueError, match="stopped"):
            model(torch.ones(1, 2))
        every.remove()
        model(torch.ones(1, 2))
        seen.append(step.index)
    assert seen == [1, 1]
