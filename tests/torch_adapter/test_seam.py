"""The adapter seam: module points install torch hooks with no bus lock held, all or nothing."""

from __future__ import annotations

import threading
import warnings
from typing import Any, List, Tuple

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
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


# --- the module point's inline fast loops against run_phase, their slow twin ----------

behaviours = st.lists(st.sampled_from(["none", "double", "raise", "return"]), max_size=4)


def _forward(plan: List[str], phase: str, slow: bool) -> Tuple[List[int], Any, Any]:
    model = nn.Sequential(nn.Identity())
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(model, bus)
    calls: List[int] = []

    def make(index: int, behaviour: str) -> Any:
        def hook(ctx: CallContext) -> Any:
            calls.append(index)
            if behaviour == "double":
                if phase == "pre":
                    ctx.args = (ctx.args[0] * 2,)
                else:
                    ctx.result = ctx.result * 2
            elif behaviour == "raise":
                raise ValueError(f"hook {index}")
            elif behaviour == "return":
                return index
            return None

        hook.__qualname__ = f"hook{index}"
        return hook

    for index, behaviour in enumerate(plan):
        getattr(attached, phase)("0", make(index, behaviour))
    out: Any = None
    error: Any = None
    try:
        if slow:
            with bus.trace():  # a trace switches the point to run_phase
                out = model(torch.ones(2))
        else:
            out = model(torch.ones(2))
    except (ValueError, TypeError) as raised:
        error = (type(raised), str(raised), getattr(raised, "__notes__", []))
    attached.detach()
    return calls, None if out is None else out.tolist(), error


@settings(max_examples=30, deadline=None)
@given(behaviours, st.sampled_from(["pre", "post"]))
def test_module_fast_loops_match_run_phase(plan: List[str], phase: str) -> None:
    assert _forward(plan, phase, slow=False) == _forward(plan, phase, slow=True)
