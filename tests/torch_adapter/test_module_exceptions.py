"""Exception hooks on modules: one rule for every hook on the module, hookbus's or not.

Exception hooks run when the forward, a pre hook or a post hook raises, and the error
propagates unchanged (recovering is for ``bus.wrap``, around the call); activation
checkpointing fires none, and an error in its recomputation reaches them. A module may
also carry plain torch hooks (a library's, a user's); their errors are errors of the
same call, and hookbus's hooks must see them the same way.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any, Iterator, List

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch_helpers import native_hooks

import hookbus
import hookbus.torch
from hookbus import CallContext

pytestmark = pytest.mark.torch


# --- exception hooks observe; the error propagates unchanged ------------------------------


def test_exception_hooks_observe_and_the_error_propagates_unchanged() -> None:
    model = nn.Sequential(nn.Linear(3, 2))
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(model, bus)
    seen: List[Any] = []
    attached.exception(
        "0", lambda ctx: seen.append((ctx.phase, type(ctx.exception), ctx.args[0].shape))
    )
    attached.exception("<root>", lambda ctx: seen.append(("root", type(ctx.exception))))
    bad = torch.ones(4, 5)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied") as caught:
        model(bad)
    assert seen == [
        ("exception", RuntimeError, torch.Size([4, 5])),
        ("root", RuntimeError),
    ]
    assert caught.value.__traceback__ is not None
    seen.clear()
    model(torch.ones(4, 3))  # a good call fires no exception hook
    assert seen == []


def test_exception_hooks_inside_an_outer_except_block_fire_only_on_errors() -> None:
    model = nn.Sequential(nn.Linear(3, 2))
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    errors: List[Any] = []
    bus.exception("0", lambda ctx: errors.append(ctx.exception))
    outputs: List[Any] = []
    bus.post("0", lambda ctx: outputs.append(ctx.result.shape))
    try:
        raise KeyError("outer")
    except KeyError:
        model(torch.ones(1, 3))  # runs while handling another error: a normal call
    assert errors == []
    assert outputs == [torch.Size([1, 2])]


def test_exception_hook_recover_warns_and_the_error_propagates() -> None:
    model = nn.Sequential(nn.Linear(3, 2))
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    bus.exception("0", lambda ctx: ctx.recover(torch.zeros(1)))
    with (
        pytest.warns(RuntimeWarning, match="cannot change the result"),
        pytest.raises(RuntimeError),
    ):
        model(torch.ones(1, 5))


@pytest.mark.parametrize("point", ["module", "every_module"])
def test_a_recovery_beside_an_around_hook_warns_and_the_error_propagates(point: str) -> None:
    """An around hook on the module changes nothing of the rule: the exception hook's
    recovery is refused loudly, as without one (resuming the around hook with the error
    must not make hookbus forget that a hook recovered)."""
    model = nn.Sequential(nn.Identity())
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    every = hookbus.torch.every_module(bus, name="every")
    name = "0" if point == "module" else "every"
    seen: List[str] = []

    def around(ctx: CallContext) -> Iterator[None]:
        try:
            yield
        except ValueError:
            seen.append("teardown got the error")
            raise

    def refuse(ctx: CallContext) -> None:
        raise ValueError("refused")

    bus.around(name, around)
    bus.pre(name, refuse)
    bus.exception(name, lambda ctx: ctx.recover(torch.zeros(1)))
    try:
        with (
            pytest.warns(RuntimeWarning, match="cannot change the result"),
            pytest.raises(ValueError, match="refused"),
        ):
            model[0](torch.ones(1))
        assert seen == ["teardown got the error"]
    finally:
        every.remove()
        net.detach()


def test_recovery_works_around_the_call_with_bus_wrap() -> None:
    model = nn.Sequential(nn.Linear(3, 2))
    bus = hookbus.EventBus()
    safe = bus.wrap(model, "predict")

    def fallback(ctx: CallContext) -> None:
        ctx.recover(torch.zeros(1, 2))

    bus.exception("predict", fallback)
    assert torch.equal(safe(torch.ones(1, 5)), torch.zeros(1, 2))


def test_a_pre_hook_error_reaches_the_exception_hooks_and_leaves_no_state() -> None:
    # One rule with the core's hook points: exception hooks see a pre hook's error.
    model = nn.Sequential(nn.Linear(3, 2))
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    seen: List[Any] = []
    bus.pre("0", lambda ctx: 1 / 0)
    bus.exception("0", lambda ctx: seen.append(type(ctx.exception).__name__))
    with pytest.raises(ZeroDivisionError):
        model(torch.ones(1, 3))
    assert seen == ["ZeroDivisionError"]
    bus.clear()
    assert native_hooks(model) == {}


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_checkpointing_fires_no_exception_hook(reentrant: bool) -> None:
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU())
    x = torch.randn(2, 4, requires_grad=True)
    seen: List[Any] = []
    with hookbus.torch.attach(model, hookbus.EventBus()) as net:
        net.exception("*", lambda ctx: seen.append((ctx.name, type(ctx.exception).__name__)))
        checkpoint(model, x, use_reentrant=reentrant).sum().backward()
    assert seen == []
    assert x.grad is not None


def test_an_error_during_recomputation_still_reaches_exception_hooks() -> None:
    calls = {"n": 0}

    class FailsSecondTime(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            calls["n"] += 1
            if calls["n"] == 2:
                raise ValueError("boom in recomputation")
            return x * x  # saves x for backward, so the recomputation reaches it

    model = nn.Sequential(nn.Linear(2, 2), FailsSecondTime())
    seen: List[str] = []
    with hookbus.torch.attach(model, hookbus.EventBus()) as net:
        net.exception("1", lambda ctx: seen.append(str(ctx.exception)))
        out = checkpoint(model, torch.ones(1, 2, requires_grad=True), use_reentrant=False)
        with pytest.raises(ValueError, match="boom"):
            out.sum().backward()
    assert seen == ["boom in recomputation"]


# --- a plain torch hook's error is an error of the same call ------------------------------


def _raise(*args: Any) -> None:
    raise ValueError("a plain torch hook failed")


def test_a_plain_torch_forward_hook_s_error_reaches_exception_hooks_not_post_hooks() -> None:
    """As for a failing hookbus post hook: the exception hooks see the error, and the post
    hooks after it do not run on an output the call never returned."""
    model = nn.Sequential(nn.Linear(2, 2))
    model[0].register_forward_hook(_raise)  # before hookbus's dispatcher
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[Any] = []
    net.post("0", lambda ctx: log.append("post"))
    net.exception("0", lambda ctx: log.append(("exception", type(ctx.exception).__name__)))
    with pytest.raises(ValueError, match="plain torch hook"):
        model(torch.ones(1, 2))
    assert log == [("exception", "ValueError")]
    net.detach()


def test_a_plain_torch_pre_hook_s_error_reaches_exception_hooks() -> None:
    """The twin that holds today: a plain torch pre hook's error fires exception hooks."""
    model = nn.Sequential(nn.Linear(2, 2))
    model[0].register_forward_pre_hook(_raise)
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[Any] = []
    net.post("0", lambda ctx: log.append("post"))
    net.exception("0", lambda ctx: log.append(("exception", type(ctx.exception).__name__)))
    with pytest.raises(ValueError, match="plain torch hook"):
        model(torch.ones(1, 2))
    assert log == [("exception", "ValueError")]
    net.detach()


def test_a_plain_torch_forward_hook_s_error_reaches_the_call_s_own_context() -> None:
    """With pre and around hooks, the call's context goes on to the exception hooks (what a
    pre hook stored is there), and the around hook's teardown gets the error at its
    ``yield``, as for a failing hookbus post hook."""
    model = nn.Sequential(nn.Linear(2, 2))
    plain = model[0].register_forward_hook(_raise)
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[Any] = []

    def span(ctx: CallContext) -> Iterator[None]:
        try:
            yield
        except ValueError as error:
            log.append(("around", str(error)))
            raise

    net.pre("0", lambda ctx: ctx.data.__setitem__("mark", 1))
    net.around("0", span)
    net.post("0", lambda ctx: log.append("post"))
    net.exception("0", lambda ctx: log.append(("exception", ctx.data.get("mark"))))
    with pytest.raises(ValueError, match="plain torch hook"):
        model(torch.ones(1, 2))
    assert log == [("exception", 1), ("around", "a plain torch hook failed")]
    plain.remove()
    log.clear()
    model(torch.ones(1, 2))
    assert log == ["post"]
    net.detach()


def test_a_plain_global_forward_hook_s_error_reaches_every_module_s_exception_hooks() -> None:
    """torch's global forward hooks run before a module's own; one registered before
    every_module's dispatcher that raises is an error of that module's call."""
    model = nn.Linear(2, 2)
    plain = torch.nn.modules.module.register_module_forward_hook(_raise)
    log: List[Any] = []
    try:
        with hookbus.torch.every_module(hookbus.EventBus()) as every:
            every.post(lambda ctx: log.append("post"))
            every.exception(lambda ctx: log.append(("exception", type(ctx.target).__name__)))
            with pytest.raises(ValueError, match="plain torch hook"):
                model(torch.ones(1, 2))
    finally:
        plain.remove()
    assert log == [("exception", "Linear")]


def test_post_hooks_still_run_when_a_plain_forward_hook_torch_runs_after_them_raises() -> None:
    """A plain torch hook registered after hookbus's dispatcher runs after hookbus's hooks
    finished: they saw a call that succeeded, and its error propagates."""
    model = nn.Sequential(nn.Linear(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[Any] = []
    net.post("0", lambda ctx: log.append("post"))
    net.exception("0", lambda ctx: log.append("exception"))
    model[0].register_forward_hook(_raise)  # after hookbus's dispatcher
    with pytest.raises(ValueError, match="plain torch hook"):
        model(torch.ones(1, 2))
    assert log == ["post"]
    net.detach()


def test_a_module_called_while_an_error_is_handled_runs_its_post_hooks() -> None:
    """An error being handled around the call (a model called in an ``except`` block) is
    not the call's: its post hooks run, its exception hooks don't."""
    model = nn.Sequential(nn.Linear(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[Any] = []
    net.post("0", lambda ctx: log.append("post"))
    net.exception("0", lambda ctx: log.append("exception"))
    try:
        raise KeyError("elsewhere")
    except KeyError:
        out = model(torch.ones(1, 2))
    assert log == ["post"]
    assert torch.allclose(out, model[0](torch.ones(1, 2)), atol=1e-6, rtol=0)
    net.detach()


class _Returns(nn.Module):
    def forward(self, x: object) -> str:
        return "output"


def _post_fails(ctx: CallContext) -> None:
    raise ValueError("post hook failed")


def _observes(ctx: CallContext) -> None:
    pass


@pytest.mark.parametrize("point", ["module", "every_module"])
@pytest.mark.parametrize("exception_hook", [False, True])
def test_a_module_call_whose_post_hook_raised_lets_go_of_its_argument(
    point: str, exception_hook: bool
) -> None:
    """A pre hook's context is shared with the post and exception phases: once a post
    hook's error propagates, that context holds no error, so no reference cycle keeps the
    call's argument (reference counting alone frees it: the collector is off)."""

    class Argument:
        pass

    bus = hookbus.EventBus()
    model = nn.Sequential(_Returns())
    net = hookbus.torch.attach(model, bus)
    every = hookbus.torch.every_module(bus, name="every")
    name = "0" if point == "module" else "every"
    bus.pre(name, _observes)
    bus.post(name, _post_fails)
    if exception_hook:
        bus.exception(name, _observes)
    argument = Argument()
    alive = weakref.ref(argument)
    gc.disable()
    try:
        with pytest.raises(ValueError, match="post hook failed"):
            model[0](argument)
        del argument
        assert alive() is None, "the argument of a module call outlived it"
    finally:
        gc.enable()
        every.remove()
        net.detach()


class _Fails(nn.Module):
    def forward(self, x: object) -> str:
        raise ValueError("forward failed")


def _replaces(ctx: CallContext) -> None:
    raise LookupError("exception hook failed")


@pytest.mark.parametrize("point", ["module", "every_module"])
def test_a_failed_module_call_lets_go_of_its_argument_when_an_exception_hook_raised(
    point: str,
) -> None:
    """An exception hook that raises instead of the forward's error (torch re-raises the
    forward's own, with a warning) leaves no reference cycle through its error: reference
    counting alone frees the call's argument (the collector is off)."""

    class Argument:
        pass

    bus = hookbus.EventBus()
    model = nn.Sequential(_Fails())
    net = hookbus.torch.attach(model, bus)
    every = hookbus.torch.every_module(bus, name="every")
    bus.exception("0" if point == "module" else "every", _replaces)
    argument = Argument()
    alive = weakref.ref(argument)
    gc.disable()
    try:
        warned = pytest.warns(RuntimeWarning, match="torch re-raises the module's own ValueError")
        with warned, pytest.raises(ValueError, match="forward failed"):
            model[0](argument)
        del argument
        assert alive() is None, "the argument of a failed module call outlived it"
    finally:
        gc.enable()
        every.remove()
        net.detach()


def _interrupts(ctx: CallContext) -> None:
    raise KeyboardInterrupt


def _passes(ctx: CallContext) -> Iterator[None]:
    yield


@pytest.mark.parametrize("point", ["module", "every_module"])
@pytest.mark.parametrize("around_hook", [False, True])
def test_a_failed_module_call_lets_go_of_its_argument_when_an_exception_hook_interrupts(
    point: str, around_hook: bool
) -> None:
    """An exception hook that raises a ``KeyboardInterrupt`` (no ``Exception``: it ends the
    call instead of the forward's error) leaves no reference cycle through the context that
    held the forward's error, with or without an around hook to resume: reference counting
    alone frees the call's argument (the collector is off)."""

    class Argument:
        pass

    bus = hookbus.EventBus()
    model = nn.Sequential(_Fails())
    net = hookbus.torch.attach(model, bus)
    every = hookbus.torch.every_module(bus, name="every")
    name = "0" if point == "module" else "every"
    bus.exception(name, _interrupts)
    if around_hook:
        bus.around(name, _passes)
    argument = Argument()
    alive = weakref.ref(argument)
    gc.disable()
    try:
        with pytest.raises(KeyboardInterrupt):
            model[0](argument)
        del argument
        assert alive() is None, "the argument of an interrupted module call outlived it"
    finally:
        gc.enable()
        every.remove()
        net.detach()


@pytest.mark.parametrize("point", ["module", "every_module"])
def test_a_pre_hook_that_removes_the_hooks_then_raises_lets_go_of_the_call_s_argument(
    point: str,
) -> None:
    """A pre hook removes every hook of the call, then raises: torch then runs no post
    dispatcher of hookbus's, and the context the pre dispatcher kept for it must not hold
    the call's argument (reference counting alone frees it: the collector is off)."""

    class Argument:
        pass

    bus = hookbus.EventBus()
    model = nn.Sequential(_Returns())
    net = hookbus.torch.attach(model, bus)
    every = hookbus.torch.every_module(bus, name="every")
    name = "0" if point == "module" else "every"
    handles: List[hookbus.Handle] = []

    def remove_then_raise(ctx: CallContext) -> None:
        for handle in handles:
            handle.remove()
        raise ValueError("pre hook failed")

    handles += [bus.pre(name, remove_then_raise), bus.post(name, _observes)]
    argument = Argument()
    alive = weakref.ref(argument)
    gc.disable()
    try:
        with pytest.raises(ValueError, match="pre hook failed"):
            model[0](argument)
        del argument
        assert alive() is None, "the argument of a module call outlived it"
    finally:
        gc.enable()
        every.remove()
        net.detach()


class _FailsOnNegative(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x < 0).any()):
            raise ValueError("negative input")
        return x


def test_a_failed_call_runs_no_post_hook_and_reaches_exception_hooks_as_the_hooks_change() -> None:
    """Whichever post dispatcher torch calls for the hooks there are (the generated one for
    post hooks alone, the full one beside exception hooks), a failed call runs no post hook,
    and every exception hook there is sees its error; a good call runs the post hooks."""
    model = nn.Sequential(_FailsOnNegative())
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[Any] = []
    net.post("0", lambda ctx: log.append("post"))
    for _ in range(2):
        with pytest.raises(ValueError, match="negative input"):
            model(-torch.ones(1))
        assert log == []
        model(torch.ones(1))
        assert log == ["post"]
        log.clear()
        handle = net.exception("0", lambda ctx: log.append(type(ctx.exception).__name__))
        with pytest.raises(ValueError, match="negative input"):
            model(-torch.ones(1))
        assert log == ["ValueError"]
        log.clear()
        handle.remove()
    net.detach()
    assert native_hooks(model) == {}


def test_only_a_post_dispatcher_that_takes_torch_s_error_path_is_marked_always_call() -> None:
    """torch calls a hook marked ``always_call`` when the call failed: the post dispatcher
    that runs exception hooks (or finishes a context a pre hook passed on) has the mark;
    the one for post hooks alone runs no error path and has none, and the mark comes back
    with the hooks that need it."""
    model = nn.Sequential(nn.Linear(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    linear = model[0]
    post = net.post("0", lambda ctx: None)
    (key,) = linear._forward_hooks
    assert key not in linear._forward_hooks_always_called
    assert key in linear._forward_hooks_with_kwargs
    exception = net.exception("0", lambda ctx: None)
    assert list(linear._forward_hooks) == [key]  # the same entry, in its place
    assert key in linear._forward_hooks_always_called
    exception.remove()
    assert key not in linear._forward_hooks_always_called
    pre = net.pre("0", lambda ctx: None)
    assert key in linear._forward_hooks_always_called  # a pre hook's context to finish
    pre.remove()
    post.remove()
    assert native_hooks(model) == {}
    assert not linear._forward_hooks_always_called
    net.detach()
