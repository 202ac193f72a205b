"""Around hooks on torch modules: a generator that spans the forward, and finishes in the
call that started it.

The teardown of an around hook is what a ``with`` block's exit is to a user: it must run
at the end of the module call that ran the set-up, however the hook's registration
changed meanwhile (claimed as ``once``, removed by a pre hook, another thread or a
scope's exit), on modules, operation points and ``every_module``, and under a
``KeyboardInterrupt``. A set-up such as ``with torch.no_grad(): yield`` that never
finishes leaves grad mode off for the whole process.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Generator, List

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import hookbus
import hookbus.torch
from hookbus import CallContext, Handle

pytestmark = pytest.mark.torch

Around = Generator[None, None, None]


def _native_hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


class Fails(nn.Module):
    def forward(self, x: Any) -> Any:
        raise ValueError("bad input")


def test_an_around_hook_spans_pre_and_post_hooks_and_replaces_the_output() -> None:
    model = nn.Sequential(nn.Linear(3, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[str] = []

    def span(ctx: CallContext) -> Around:
        log.append("enter")
        yield
        log.append("exit")
        ctx.result = ctx.result * 0

    net.around("0", span)
    net.pre("0", lambda ctx: log.append("pre"))
    net.post("0", lambda ctx: log.append("post"))
    out = model(torch.ones(1, 3))
    assert torch.equal(out, torch.zeros(1, 2))
    assert log == ["enter", "pre", "post", "exit"]
    net.detach()
    assert _native_hooks(model) == 0


def test_the_error_of_the_forward_is_raised_at_the_yield_and_propagates() -> None:
    model = nn.Sequential(Fails())
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[str] = []

    def span(ctx: CallContext) -> Around:
        try:
            yield
        except ValueError as error:
            log.append(f"saw {error}")
            raise
        finally:
            log.append("closed")

    net.around("0", span)
    with pytest.raises(ValueError, match="bad input"):
        model(torch.ones(1))
    assert log == ["saw bad input", "closed"]


def test_translating_a_forward_error_on_a_module_warns_that_torch_re_raises() -> None:
    model = nn.Sequential(Fails())
    net = hookbus.torch.attach(model, hookbus.EventBus())

    def translate(ctx: CallContext) -> Around:
        try:
            yield
        except ValueError as error:
            raise KeyError("other") from error

    net.around("0", translate)
    with pytest.warns(RuntimeWarning, match="re-raises the module's own"):  # noqa: SIM117
        with pytest.raises(ValueError, match="bad input"):
            model(torch.ones(1))


def test_a_pre_hook_error_still_runs_the_teardown() -> None:
    model = nn.Sequential(nn.Linear(3, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[str] = []

    def span(ctx: CallContext) -> Around:
        try:
            yield
        finally:
            log.append("closed")

    net.around("0", span)
    net.pre("0", lambda ctx: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        model(torch.ones(1, 3))
    assert log == ["closed"]


def test_a_post_hook_error_reaches_exception_hooks_and_teardown_which_may_recover() -> None:
    model = nn.Sequential(nn.Linear(3, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[str] = []

    def span(ctx: CallContext) -> Around:
        try:
            yield
        except KeyError:
            log.append("teardown saw KeyError")
            ctx.recover(torch.full((1, 2), 7.0))

    def broken(ctx: CallContext) -> None:
        raise KeyError("post")

    net.around("0", span)
    net.post("0", broken)
    net.exception("0", lambda ctx: log.append(f"exception hook {type(ctx.exception).__name__}"))
    out = model(torch.ones(1, 3))  # the error was ours to finish: recovered
    assert torch.equal(out, torch.full((1, 2), 7.0))
    assert log == ["exception hook KeyError", "teardown saw KeyError"]


def test_checkpoint_recomputation_is_no_error_for_an_around_hook() -> None:
    inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    net = hookbus.torch.attach(inner, hookbus.EventBus())
    errors: List[str] = []
    entered: List[str] = []

    def span(ctx: CallContext) -> Around:
        entered.append(ctx.name)
        try:
            yield
        except Exception as error:  # a false error would show here
            errors.append(type(error).__name__)
            raise

    net.around("0", span)
    x = torch.ones(2, 4, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = checkpoint(inner, x, use_reentrant=False)
        out.sum().backward()
    assert errors == []
    assert entered == ["0", "0"]  # the forward, and its recomputation in backward
    assert x.grad is not None


def test_an_around_hook_on_a_huggingface_block() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2,
        n_head=2,
        n_embd=32,
        vocab_size=100,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        expected = model(ids).logits
    net = hookbus.torch.attach(model, hookbus.EventBus())
    shapes: List[Any] = []

    def span(ctx: CallContext) -> Around:
        yield
        hidden = ctx.result[0] if isinstance(ctx.result, tuple) else ctx.result
        shapes.append(tuple(hidden.shape))

    net.around("transformer.h.?", span)  # the blocks, not their children
    with torch.no_grad():
        got = model(ids).logits
    assert shapes == [(1, 4, 32), (1, 4, 32)]
    assert torch.allclose(got, expected, atol=1e-6)
    net.detach()
    assert _native_hooks(model) == 0


# --- whatever started an around hook resumes it, in the same call -------------------------


def _logged(log: List[str]) -> Callable[[CallContext], Around]:
    def span(ctx: CallContext) -> Around:
        log.append("set-up")
        try:
            yield
        finally:
            log.append("teardown")

    return span


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


def test_a_once_around_hook_that_turns_grad_off_leaves_it_on_after_the_call() -> None:
    """The high-stakes case: a set-up that changes process state must be undone in its call."""
    model = nn.Sequential(nn.Linear(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())

    def frozen(ctx: CallContext) -> Around:
        with torch.no_grad():
            yield

    net.around("0", frozen, once=True)
    out = model(torch.ones(1, 2))
    assert not out.requires_grad
    assert torch.is_grad_enabled()
    assert _native_hooks(model) == 0  # the dispatchers kept for the call went with it
    net.detach()


def _interrupt(ctx: CallContext) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("where", ["pre hook", "post hook", "exception hook"])
def test_a_keyboard_interrupt_in_a_hook_of_the_module_call_reaches_its_around_hooks(
    where: str,
) -> None:
    """torch calls no hook for a ``KeyboardInterrupt`` anywhere in the call: the dispatcher
    that raised it resumes the around hooks with it, as a ``with`` block would."""
    model = nn.Sequential(nn.Linear(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[str] = []

    def span(ctx: CallContext) -> Around:
        try:
            yield
        except BaseException as error:
            log.append(type(error).__name__)
            raise
        finally:
            log.append("teardown")

    net.around("0", span)
    if where == "pre hook":
        failing = net.pre("0", _interrupt)
    elif where == "post hook":
        failing = net.post("0", _interrupt)
    else:
        failing = net.post("0", lambda ctx: 1 / 0)
        net.exception("0", _interrupt)
    with pytest.raises(KeyboardInterrupt):
        model(torch.ones(1, 2))
    assert log == ["KeyboardInterrupt", "teardown"]
    failing.remove()
    model(torch.ones(1, 2))  # nothing left behind: the next call runs as usual
    assert log == ["KeyboardInterrupt", "teardown", "teardown"]
    net.detach()


def test_on_every_module_an_around_hook_that_a_keyboard_interrupt_passed_is_closed_next_call() -> (
    None
):
    """every_module has no forward of its own to catch a ``KeyboardInterrupt`` in (torch's
    global hooks see none): the around hook is closed at the thread's next module call,
    as documented, never left to the garbage collector."""
    log: List[str] = []
    with hookbus.torch.every_module(hookbus.EventBus()) as every:
        every.around(_logged(log), target=None)
        with pytest.raises(KeyboardInterrupt):
            Interrupted()(torch.ones(1))
        assert log == ["set-up"]
        nn.Identity()(torch.ones(1))
        assert log == ["set-up", "teardown", "set-up", "teardown"]


class TwoTanh(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(torch.tanh(x))


@pytest.mark.parametrize("how", ["once", "removed by a pre hook"])
def test_an_around_hook_on_an_operation_point_finishes_in_the_call_that_started_it(
    how: str,
) -> None:
    model = nn.Sequential(TwoTanh())
    net = hookbus.torch.attach(model, hookbus.EventBus())
    net.operations("0", torch.tanh)
    model(torch.ones(1))  # the discovery forward
    log: List[str] = []
    if how == "once":
        net.around("0:tanh.1", _logged(log), once=True)
    else:
        handle = net.around("0:tanh.1", _logged(log))
        net.pre("0:tanh.1", lambda ctx: handle.remove())
    model(torch.ones(1))
    assert log == ["set-up", "teardown"]
    model(torch.ones(1))
    assert log == ["set-up", "teardown"]
    net.detach()


def test_an_around_hook_s_set_up_error_on_a_module_names_the_hook() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())

    def broken_span(ctx: CallContext) -> Around:
        raise ValueError("set-up failed")
        yield

    net.around("0", broken_span)
    with pytest.raises(ValueError, match="set-up failed") as raised:
        model(torch.ones(1, 2))
    notes: List[str] = getattr(raised.value, "__notes__", [])
    assert any("broken_span" in note for note in notes), notes
    net.detach()


def test_a_trace_records_around_hooks_on_modules_and_on_every_module() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(nn.Linear(2, 2))
    net = hookbus.torch.attach(model, bus)
    log: List[str] = []
    on_module = net.around("0", _logged(log))
    with hookbus.torch.every_module(bus) as every:
        on_every = every.around(_logged(log))
        with bus.trace() as trace:
            model(torch.ones(1, 2))
    kinds = [(record.handle, record.kind) for record in trace.records]
    assert kinds.count((on_module, "around")) == 1
    assert kinds.count((on_every, "around")) == 2  # the Sequential and its Linear
    net.detach()


def test_detach_during_a_forward_closes_the_around_hooks_it_started() -> None:
    """The documented exception: detach() removes the dispatchers that would resume them,
    so the around hooks of the call under way are closed then (their ``finally`` runs)."""
    model = nn.Sequential(nn.Linear(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[str] = []
    net.around("0", _logged(log))
    net.pre("0", lambda ctx: net.detach())
    model(torch.ones(1, 2))
    assert log == ["set-up", "teardown"]
    assert _native_hooks(model) == 0


def test_around_hooks_finish_in_their_calls_while_another_thread_adds_and_removes_them() -> None:
    """Bounded stress: one thread calls the model while another registers around hooks
    (``once`` or not) and removes them; every set-up a call ran is torn down before that
    call returns, and once all is removed no native hook is left."""
    model = nn.Sequential(nn.Linear(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    open_spans = threading.local()
    set_ups: List[int] = []
    stop = threading.Event()

    def span(ctx: CallContext) -> Around:
        set_ups.append(1)
        open_spans.count = getattr(open_spans, "count", 0) + 1
        try:
            yield
        finally:
            open_spans.count -= 1

    def churn() -> None:
        once = False
        while not stop.is_set():
            once = not once
            handle = net.around("0", span, once=once)
            time.sleep(0.0002)  # calls start it meanwhile; the removal lands mid-call
            handle.remove()

    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads take turns often
    worker = threading.Thread(target=churn)
    worker.start()
    left_open = 0
    try:
        x = torch.ones(1, 2)
        for _ in range(20_000):
            model(x)
            left_open = getattr(open_spans, "count", 0)
            if left_open or len(set_ups) >= 200:
                break
    finally:
        stop.set()
        worker.join(10)
        sys.setswitchinterval(switching)
    assert not worker.is_alive()
    assert set_ups, "no call ran the around hook: the stress did not happen"
    assert left_open == 0, "a call returned before the teardown of an around hook it started"
    assert _native_hooks(model) == 0


class _InterruptedForward(nn.Module):
    def forward(self, x: object) -> object:
        raise KeyboardInterrupt


class _Returns(nn.Module):
    def forward(self, x: object) -> object:
        return x


def _interrupting_pre_hook(ctx: CallContext) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("where", ["forward", "a pre hook"])
def test_an_around_hook_that_turns_an_interrupt_into_an_error_runs_after_the_exception_hooks(
    where: str,
) -> None:
    """A ``KeyboardInterrupt`` passes the exception hooks by; the around hook's teardown,
    which runs after every exception hook, raises an error instead. That error ends the
    call: it is no new error of the call for the exception hooks (torch's ``always_call``
    post dispatcher sees it go by all the same)."""
    bus = hookbus.EventBus()
    model = nn.Sequential(_InterruptedForward() if where == "forward" else _Returns())
    net = hookbus.torch.attach(model, bus)
    log: List[str] = []

    def translate(ctx: CallContext) -> Generator[None, None, None]:
        try:
            yield
        except KeyboardInterrupt:
            log.append("teardown")
            raise RuntimeError("stopped") from None

    net.around("0", translate)
    net.exception("0", lambda ctx: log.append("exception hook"))
    if where == "a pre hook":
        net.pre("0", _interrupting_pre_hook)
    with pytest.raises(RuntimeError, match="stopped"):
        model(1)
    assert log == ["teardown"]
    net.detach()


def _pass_through(ctx: CallContext) -> Around:
    yield


def _recover(ctx: CallContext) -> None:
    ctx.recover(0)


@pytest.mark.parametrize("point", ["module", "every_module"])
@pytest.mark.parametrize("exception_hook", [None, _recover])
def test_a_failed_module_call_lets_go_of_its_argument_once_its_around_hooks_ran(
    point: str, exception_hook: object
) -> None:
    """Resuming the around hooks with the forward's error leaves no reference cycle through
    that error: reference counting alone frees the call's argument (the collector is off)."""

    class Argument:
        pass

    bus = hookbus.EventBus()
    model = nn.Sequential(Fails())
    net = hookbus.torch.attach(model, bus)
    every = hookbus.torch.every_module(bus, name="every")
    name = "0" if point == "module" else "every"
    bus.around(name, _pass_through)
    if exception_hook is not None:
        bus.exception(name, exception_hook)
    argument = Argument()
    alive = weakref.ref(argument)
    gc.disable()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the recovery's: torch re-raises
            with pytest.raises(ValueError, match="bad input"):
                model[0](argument)
        del argument
        assert alive() is None, "the argument of a failed module call outlived it"
    finally:
        gc.enable()
        every.remove()
        net.detach()


def test_a_module_call_that_a_keyboard_interrupt_ended_lets_go_of_its_argument() -> None:
    """The forward's ``KeyboardInterrupt``, raised at the around hook's ``yield`` by the
    module's forward swap, leaves no reference cycle through it: reference counting alone
    frees the call's argument (the collector is off)."""

    class Argument:
        pass

    bus = hookbus.EventBus()
    model = nn.Sequential(Interrupted())
    net = hookbus.torch.attach(model, bus)
    net.around("0", _pass_through)
    argument = Argument()
    alive = weakref.ref(argument)
    gc.disable()
    try:
        with pytest.raises(KeyboardInterrupt):
            model(argument)
        del argument
        assert alive() is None, "the argument of an interrupted module call outlived it"
    finally:
        gc.enable()
        net.detach()
