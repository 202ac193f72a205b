"""Around hooks on torch modules: a generator that spans the forward."""

from __future__ import annotations

import warnings
from typing import Any, Generator, List

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

import hookbus  # noqa: E402
import hookbus.torch  # noqa: E402
from hookbus import CallContext  # noqa: E402

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
