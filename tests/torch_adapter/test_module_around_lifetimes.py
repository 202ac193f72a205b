"""Around hooks on modules: whatever started an around hook resumes it, in the same call.

The teardown of an around hook is what a ``with`` block's exit is to a user: it must
run at the end of the module call that ran the set-up, however the hook's registration
changed meanwhile (claimed as ``once``, removed by a pre hook, another thread or a
scope's exit). A set-up such as ``with torch.no_grad(): yield`` that never finishes
leaves grad mode off for the whole process.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Generator, List

import pytest
import torch
from torch import nn

import hookbus
import hookbus.torch
from hookbus import CallContext, Handle

pytestmark = pytest.mark.torch

Around = Generator[None, None, None]


def _logged(log: List[str]) -> Callable[[CallContext], Around]:
    def span(ctx: CallContext) -> Around:
        log.append("set-up")
        try:
            yield
        finally:
            log.append("teardown")

    return span


@pytest.mark.xfail(
    strict=True,
    reason="a once around hook on a module: claiming it drops the post dispatcher that "
    "resumes it, so its teardown never runs",
)
def test_a_once_around_hook_on_a_module_finishes_in_the_call_that_started_it() -> None:
    """``once`` removes the hook after its first call, not in the middle of it."""
    model = nn.Sequential(nn.Linear(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[str] = []
    net.around("0", _logged(log), once=True)
    model(torch.ones(1, 2))
    assert log == ["set-up", "teardown"]
    model(torch.ones(1, 2))
    assert log == ["set-up", "teardown"]  # once: not again
    net.detach()


def _remove_from_a_pre_hook(handle: Handle) -> None:
    handle.remove()


def _remove_from_another_thread(handle: Handle) -> None:
    thread = threading.Thread(target=handle.remove)
    thread.start()
    thread.join(10)


@pytest.mark.xfail(
    strict=True,
    reason="an around hook removed while its module call runs is not resumed at the end of "
    "that call; its teardown waits for detach or the garbage collector",
)
@pytest.mark.parametrize(
    "remove",
    [_remove_from_a_pre_hook, _remove_from_another_thread],
    ids=["by a pre hook", "from another thread"],
)
def test_an_around_hook_removed_during_its_module_call_finishes_in_that_call(
    remove: Callable[[Handle], None],
) -> None:
    """A removal stops the hook from starting again; the call it started owns its teardown."""
    model = nn.Sequential(nn.Linear(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[str] = []
    handle = net.around("0", _logged(log))
    net.pre("0", lambda ctx: remove(handle))
    model(torch.ones(1, 2))
    assert log == ["set-up", "teardown"]
    net.detach()


@pytest.mark.xfail(
    strict=True,
    reason="an around hook whose scope exits while its module call runs is not resumed at "
    "the end of that call",
)
def test_an_around_hook_whose_scope_exits_during_its_module_call_finishes_in_that_call() -> None:
    """A scope's exit is a removal like any other (here, from inside the forward)."""
    bus = hookbus.EventBus()
    model = nn.Sequential(nn.Linear(2, 2))
    net = hookbus.torch.attach(model, bus)
    log: List[str] = []
    scope = bus.scope()
    with contextlib.ExitStack() as stack:
        stack.enter_context(scope)
        bus.around("0", _logged(log))
        net.pre("0", lambda ctx: stack.close())  # leaves the scope during the call
        model(torch.ones(1, 2))
    assert log == ["set-up", "teardown"]
    net.detach()


class Interrupted(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise KeyboardInterrupt


@pytest.mark.xfail(
    strict=True,
    reason="a KeyboardInterrupt raised in a module's forward never reaches its around hooks "
    "(torch calls no always_call hook for it): the teardown waits for the garbage collector",
)
def test_a_keyboard_interrupt_in_the_forward_is_raised_at_the_around_hook_s_yield() -> None:
    """``bus.around``'s promise: a ``BaseException`` is raised at the ``yield`` too, and goes
    on; Ctrl-C during a forward must still close what the set-up opened."""
    model = nn.Sequential(Interrupted())
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[str] = []

    def span(ctx: CallContext) -> Around:
        log.append("set-up")
        try:
            yield
        except BaseException as error:
            log.append(type(error).__name__)
            raise
        finally:
            log.append("teardown")

    net.around("0", span)
    with pytest.raises(KeyboardInterrupt):
        model(torch.ones(1, 2))
    assert log == ["set-up", "KeyboardInterrupt", "teardown"]
    net.detach()


@pytest.mark.xfail(
    strict=True,
    reason="on every_module too: a once around hook, or one removed by a pre hook, is not "
    "resumed at the end of the module call that started it",
)
@pytest.mark.parametrize("how", ["once", "removed by a pre hook"])
def test_an_around_hook_on_every_module_finishes_in_the_call_that_started_it(how: str) -> None:
    """every_module's point dispatches as a module's does: the same ownership rule."""
    log: List[str] = []
    layer = nn.Linear(2, 2)
    with hookbus.torch.every_module(hookbus.EventBus()) as every:
        if how == "once":
            every.around(_logged(log), once=True)
        else:
            handle = every.around(_logged(log))
            every.pre(lambda ctx: handle.remove())
        layer(torch.ones(1, 2))
        assert log == ["set-up", "teardown"]  # in the call, not at every.remove()
