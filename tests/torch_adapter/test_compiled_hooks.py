"""Hooks on compiled models: no silent misses under ``torch.compile``.

torch (dynamo) skips its guards on a module's empty hook dicts, so code compiled
while a module had no hook keeps running after hooks are added: a capture came
back empty, steering did nothing. hookbus makes them take effect; these tests
compare with hand-written torch hooks on the eager model, to 1e-6. The
``"eager"`` backend keeps them fast (dynamo's guards are the same with inductor).
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, List

import pytest
import torch
from torch import nn
from torch_helpers import SmallNet, hook_state, tiny_gpt2

import hookbus
import hookbus.torch
from hookbus import CallContext


def _net() -> nn.Module:
    torch.manual_seed(0)
    return SmallNet().eval()


def _sequential() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()


def _gpt2() -> Any:
    return tiny_gpt2()


def _eager_outputs(model: nn.Module, names: List[str], run: Any) -> Dict[str, Any]:
    """What hand-written torch forward hooks on the eager model see (last call)."""
    seen: Dict[str, Any] = {}
    modules = dict(model.named_modules())
    handles = [
        modules[name].register_forward_hook(
            lambda m, a, o, name=name: seen.__setitem__(name, o.detach())
        )
        for name in names
    ]
    try:
        with torch.no_grad():
            run()
    finally:
        for handle in handles:
            handle.remove()
    return seen


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Any:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# --- hooks added after a hook-less compiled call take effect ------------------------------


@pytest.mark.parametrize("make", [_net, _sequential], ids=["hand-written", "sequential"])
def test_a_capture_after_a_hookless_compiled_call_records_every_module(make: Any) -> None:
    model = make()
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(3, 4)
    with torch.no_grad():
        compiled(x)  # the first compiled call: no hook anywhere
    names = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    expected = _eager_outputs(model, names, lambda: model(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the hooks take effect: nothing to warn about
        with torch.no_grad(), hookbus.torch.capture(compiled, nn.Linear) as cache:
            compiled(x)
    assert list(cache) == names
    for name in names:
        assert torch.allclose(cache[name].output, expected[name], atol=1e-6)
    assert hook_state(model) == hook_state(make())
    assert "forward" not in vars(model.get_submodule(names[-1]))


def test_steering_after_a_hookless_compiled_call_takes_effect_and_goes_on_removal() -> None:
    model = _net()
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(3, 4)
    with torch.no_grad():
        plain = compiled(x)
    handle = model.act.register_forward_hook(lambda m, a, o: o + 1.0)
    with torch.no_grad():
        expected = model(x)  # hand-written steering on the eager model
    handle.remove()
    net = hookbus.torch.attach(compiled, hookbus.EventBus())

    def steer(ctx: CallContext) -> None:
        ctx.result = ctx.result + 1.0

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad(), net.post("act", steer):
            steered = compiled(x)
    assert torch.allclose(steered, expected, atol=1e-6)
    assert not torch.allclose(steered, plain, atol=1e-3)
    with torch.no_grad():
        assert torch.allclose(compiled(x), plain, atol=1e-6)
    net.detach()
    assert hook_state(model) == hook_state(_net())


@pytest.mark.filterwarnings("ignore:Dynamo does not know how to trace")  # torch's
def test_every_change_of_a_modules_hooks_reaches_the_compiled_model() -> None:
    # Each state is compiled once; going back to one must not reuse code compiled
    # for another (torch guards a non-empty hook dict by its length only).
    model = _sequential()
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(3, 4)
    with torch.no_grad():
        plain = compiled(x)
        bus = hookbus.EventBus()
        net = hookbus.torch.attach(compiled, bus)
        seen: List[str] = []

        def zero_input(ctx: CallContext) -> None:
            ctx.args = (torch.zeros_like(ctx.args[0]),)

        bias = model[2].bias.expand(3, 2)
        for _ in range(3):
            post = net.post("2", lambda ctx: seen.append("post"))
            compiled(x)
            assert seen == ["post"]
            pre = net.pre("2", zero_input)  # a second hook dict on the same module
            assert torch.allclose(compiled(x), bias, atol=1e-6)
            assert seen == ["post", "post"]
            post.remove()
            assert torch.allclose(compiled(x), bias, atol=1e-6)
            pre.remove()
            assert torch.allclose(compiled(x), plain, atol=1e-6)
            assert seen == ["post", "post"]
            seen.clear()
        net.detach()
    assert hook_state(model) == hook_state(_sequential())


def test_gpt2_capture_and_steering_after_a_hookless_compiled_call() -> None:
    model = _gpt2()
    compiled = torch.compile(model, backend="eager")
    ids = torch.randint(0, 100, (1, 6))
    with torch.no_grad():
        plain = compiled(ids).logits
    names = ["transformer.h.0", "transformer.h.1.mlp"]
    expected = _eager_outputs(model, names[1:], lambda: model(ids))
    with torch.no_grad(), hookbus.torch.capture(compiled, names) as cache:
        compiled(ids)
    assert list(cache) == names
    assert torch.allclose(cache[names[1]].output, expected[names[1]], atol=1e-6)

    net = hookbus.torch.attach(compiled, hookbus.EventBus())
    handle = model.transformer.h[1].mlp.register_forward_hook(lambda m, a, o: o * 0)
    with torch.no_grad():
        ablated = model(ids).logits  # hand-written, eager
    handle.remove()

    def ablate(ctx: CallContext) -> None:
        ctx.result = ctx.result * 0

    with torch.no_grad(), net.post("transformer.h.1.mlp", ablate):
        out = compiled(ids).logits
    assert torch.allclose(out, ablated, atol=1e-6)
    with torch.no_grad():
        assert torch.allclose(compiled(ids).logits, plain, atol=1e-6)
    net.detach()


# --- the compile warning fires only where hooks are ignored ---------------------------


def test_no_compile_warning_when_hooks_were_there_before_the_first_compiled_call() -> None:
    model = _net()
    compiled = torch.compile(model, backend="eager")
    net = hookbus.torch.attach(compiled, hookbus.EventBus())
    seen: List[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        net.post("out", lambda ctx: seen.append(ctx.name))
        with torch.no_grad():
            compiled(torch.randn(3, 4))
    assert seen == ["out"]
    net.detach()


def test_exception_hooks_on_a_compiled_model_warn_that_they_do_not_run() -> None:
    model = _net()
    compiled = torch.compile(model, backend="eager")
    net = hookbus.torch.attach(compiled, hookbus.EventBus())
    with pytest.warns(hookbus.torch.CompiledModelWarning, match="exception") as caught:
        net.exception("out", lambda ctx: None)
    assert caught[0].filename == __file__
    net.detach()


# --- capture() says when a module it selected never ran -------------------------------


def test_capture_warns_at_exit_naming_the_selected_modules_that_never_ran() -> None:
    model = _net()
    with (
        pytest.warns(RuntimeWarning, match=r"never ran: 'out'") as caught,
        hookbus.torch.capture(model, ["inp", "out"]) as cache,
    ):
        model.inp(torch.randn(3, 4))  # a branch that skips 'out'
    message = str(caught[0].message)
    assert "'inp'" not in message  # only what never ran
    assert "torch.compile" in message
    assert "branch" in message
    assert caught[0].filename == __file__
    assert list(cache) == ["inp"]


def test_capture_warning_names_the_shortest_useful_list() -> None:
    model = _gpt2()
    with (
        pytest.warns(RuntimeWarning) as caught,
        torch.no_grad(),
        hookbus.torch.capture(model, "transformer.h.*") as cache,
    ):
        model.transformer.wte(torch.randint(0, 100, (1, 3)))  # not the blocks
    message = str(caught[0].message)
    # Every block's submodules too: the outermost names stand for them.
    assert "'transformer.h.0', 'transformer.h.1'" in message
    assert "'transformer.h.0.attn'" not in message
    assert len(cache) == 0


def test_capture_does_not_warn_when_every_selected_module_ran() -> None:
    model = _gpt2()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad(), hookbus.torch.capture(model, "transformer.h.*") as cache:
            model(torch.randint(0, 100, (1, 3)))
        net = _net()
        with hookbus.torch.capture(net, nn.Linear, sink=lambda name, call: None):
            net(torch.randn(3, 4))  # sent to the sink, not stored: they ran all the same
    assert "transformer.h.1.mlp" in cache


def test_capture_does_not_warn_when_its_block_raised() -> None:
    model = _net()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(KeyError), hookbus.torch.capture(model, nn.Linear):
            raise KeyError("the block's own error says what went wrong")


# --- what compile changes: eager values, a recompile on change, no exception hooks --------


def _compiled_model() -> Any:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


@pytest.mark.timeout(240)
def test_capture_on_a_compiled_model_gives_the_eager_values() -> None:
    torch._dynamo.reset()
    model = _compiled_model()
    compiled = torch.compile(model)  # the default backend (inductor)
    x = torch.randn(3, 4)
    with hookbus.torch.capture(model, nn.Linear) as eager:
        expected = model(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the hooks take effect: no warning
        with hookbus.torch.capture(compiled, nn.Linear) as cache:
            out = compiled(x)
    assert torch.allclose(out, expected, atol=1e-6)
    assert list(cache) == ["0", "2"]
    for name in cache:
        assert torch.allclose(cache[name].output, eager[name].output, atol=1e-6)
    assert hook_state(model) == hook_state(_compiled_model())


@pytest.mark.timeout(240)
def test_compiled_model_runs_hooks_added_after_a_hookless_first_call() -> None:
    # torch alone ignores them (it skips its guards on empty hook dicts); hookbus
    # makes the code that calls the module compile again (ModulePoint.recompile_on_change).
    torch._dynamo.reset()
    model = _compiled_model()
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(3, 4)
    plain = compiled(x)  # the first compiled call, with no hook anywhere
    attached = hookbus.torch.attach(compiled, hookbus.EventBus())
    seen: List[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        handle = attached.post("2", lambda ctx: seen.append(ctx.name))
    compiled(x)
    assert seen == ["2"]
    handle.remove()
    attached.detach()
    assert torch.equal(compiled(x), plain)
    assert seen == ["2"]
    assert hook_state(model) == hook_state(_compiled_model())


@pytest.mark.timeout(240)
def test_compiled_model_that_had_hooks_recompiles_when_they_change() -> None:
    torch._dynamo.reset()
    model = _compiled_model()
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(3, 4)
    attached = hookbus.torch.attach(compiled, hookbus.EventBus())
    seen: List[str] = []
    attached.post("0", lambda ctx: seen.append(ctx.name))
    compiled(x)
    assert seen == ["0"]

    def double(ctx: CallContext) -> None:
        ctx.result = ctx.result * 2

    with attached.post("2", double):
        doubled = compiled(x)
    plain = compiled(x)
    assert torch.allclose(doubled, 2 * plain, atol=1e-6)
    attached.detach()


@pytest.mark.timeout(240)
def test_a_compiled_model_with_a_post_hook_does_not_recompile_at_each_call() -> None:
    # The call counter behind ctx.call_index must not be a value dynamo guards on: it
    # changes at every call, so each call would compile again until torch's
    # recompile_limit, after which the whole model runs eagerly for good.
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    model = _compiled_model()
    compiled = torch.compile(model, backend=counter)
    x = torch.randn(3, 4)
    attached = hookbus.torch.attach(compiled, hookbus.EventBus())
    seen: List[int] = []
    attached.post("2", lambda ctx: seen.append(ctx.call_index))
    compiled(x)
    compiled(x)
    frames = counter.frame_count
    calls = torch._dynamo.config.recompile_limit + 2
    for _ in range(calls):
        compiled(x)
    assert counter.frame_count == frames
    assert seen == list(range(calls + 2))
    attached.detach()


@pytest.mark.timeout(240)
def test_exception_hooks_do_not_run_under_compile() -> None:
    torch._dynamo.reset()
    model = _compiled_model()
    compiled = torch.compile(model, backend="eager")
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(compiled, bus)
    seen: List[Any] = []
    with pytest.warns(hookbus.torch.CompiledModelWarning):
        attached.exception("0", lambda ctx: seen.append(ctx.exception))
    with pytest.raises(Exception, match=r"shape|size|mat"):
        compiled(torch.randn(3, 5))
    assert seen == []  # torch skips always_call hooks while compiling
    attached.detach()
    assert hook_state(model) == hook_state(_compiled_model())
