"""The adapter seam: module points install torch hooks with no bus lock held, all or nothing."""

from __future__ import annotations

import threading
import warnings
from typing import Any, List

import pytest
import torch
from torch import nn
from torch_helpers import hook_state

import hookbus
import hookbus.torch
from hookbus import CallContext


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


def _noop(ctx: CallContext) -> None:
    pass


def test_a_compile_warning_turned_error_undoes_the_registration() -> None:
    # -W error on a compiled model: the warning is raised where the native hook is
    # installed; the caller gets it, and neither the bus nor the model keep anything.
    model = _model()
    before = hook_state(model)
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(torch.compile(model, backend="eager"), bus)
    with warnings.catch_warnings():
        warnings.simplefilter("error", hookbus.torch.CompiledModelWarning)
        with pytest.raises(hookbus.torch.CompiledModelWarning):
            attached.exception("0", _noop)  # torch skips them under compile: warned
        with pytest.raises(hookbus.torch.CompiledModelWarning):
            bus.exception("2", _noop)  # through the bus by name: the same
    assert bus.hooks() == []
    assert attached.hooks() == []
    assert hook_state(model) == before
    attached.detach()


def test_the_compile_warning_runs_with_no_bus_lock_held() -> None:
    # A warnings hook that registers on the same bus would deadlock under the lock.
    model = _model()
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(torch.compile(model, backend="eager"), bus)
    seen: List[str] = []

    def show(message: Any, *args: Any, **kwargs: Any) -> None:
        bus.on("warned", seen.append)
        bus.emit("warned", str(message)[:8])

    def register() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = show
            attached.exception("0", _noop)

    thread = threading.Thread(target=register, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "deadlocked: the warning was issued under the bus lock"
    assert seen == ["hookbus."]
    attached.detach()


def test_the_compile_warning_points_at_the_callers_line() -> None:
    model = _model()
    attached = hookbus.torch.attach(torch.compile(model, backend="eager"), hookbus.EventBus())
    with pytest.warns(hookbus.torch.CompiledModelWarning) as caught:
        attached.exception("0", _noop)
    assert caught[0].filename == __file__
    attached.detach()


def test_module_points_use_the_registry_plan_and_its_fast_path_rule() -> None:
    model = _model()
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(model, bus)
    calls: List[str] = []
    bus.post("0", lambda ctx: calls.append("plain"))
    bus.post("0", lambda ctx: calls.append("once"), once=True)
    model(torch.ones(1, 4))
    model(torch.ones(1, 4))
    assert calls == ["plain", "once", "plain"]
    with bus.trace() as trace:  # tracing leaves the fast path, and comes back after
        model(torch.ones(1, 4))
    assert [record.name for record in trace.records] == ["0"]
    attached.detach()
    assert hook_state(model) == hook_state(_model())
