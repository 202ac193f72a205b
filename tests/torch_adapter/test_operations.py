"""Hook points on the operations inside a module's forward (``net.operations``).

Checked against hand-written torch (a monkeypatch of the function, restored by hand)
on a small random Hugging Face GPT-2 under the eager and the sdpa attention, and on a
hand-written attention; plus cleanup (removal, errors, detach, interrupts, copies).

An operation point is named by the call index of its operation within one forward of
the selected module. Only names that a forward calls are hook points, and only the
forward's own calls are counted: a hook that calls the same torch function must not
shift the numbering, or an ablation would edit the wrong tensor.
"""

from __future__ import annotations

import copy
import gc
import math
import threading
import warnings
import weakref
from typing import Any, Callable, Dict, Iterator, List

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_helpers import hook_state

import hookbus
import hookbus.torch
from hookbus import CallContext


def gpt2(implementation: str) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64, use_cache=False
    )
    config._attn_implementation = implementation
    return transformers.GPT2LMHeadModel(config).eval()


TOKENS = torch.arange(10).reshape(1, 10) % 100


class Attention(nn.Module):
    """A hand-written causal self-attention: matmul, softmax, matmul."""

    def __init__(self, width: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=-1)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        pattern = torch.softmax(scores, dim=-1)
        z = torch.matmul(pattern, v)
        return self.out(z.transpose(1, 2).reshape(batch, length, width))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.attn = Attention()
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.attn(x))


X = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1))


@pytest.fixture
def bus() -> hookbus.EventBus:
    return hookbus.EventBus()


def patched(module_path: Any, attribute: str, wrapper: Callable[..., Any]) -> Any:
    """Hand-written torch: replace ``module_path.attribute`` during one call, restored by hand."""

    class Patch:
        def __enter__(self) -> None:
            self.original = getattr(module_path, attribute)
            setattr(module_path, attribute, wrapper(self.original))

        def __exit__(self, *exc: object) -> None:
            setattr(module_path, attribute, self.original)

    return Patch()


# --- what a user relies on: the values, on GPT-2 and on a hand-written model ----------


def test_attention_pattern_of_eager_gpt2_equals_a_monkeypatched_softmax(
    bus: hookbus.EventBus,
) -> None:
    model = gpt2("eager")
    seen: List[torch.Tensor] = []

    def keep(original: Callable[..., Any]) -> Callable[..., Any]:
        def softmax(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            seen.append(out.detach())
            return out

        return softmax

    with torch.no_grad(), patched(F, "softmax", keep):
        expected = model(TOKENS).logits
    with hookbus.torch.attach(model, bus) as net:
        net.operations("transformer.h.*.attn", F.softmax)
        patterns: Dict[str, torch.Tensor] = {}
        bus.post("*:softmax.*", lambda ctx: patterns.__setitem__(ctx.name, ctx.result))
        with torch.no_grad():
            logits = model(TOKENS).logits
    assert list(patterns) == ["transformer.h.0.attn:softmax.0", "transformer.h.1.attn:softmax.0"]
    assert patterns["transformer.h.0.attn:softmax.0"].shape == (1, 2, 10, 10)
    for got, want in zip(patterns.values(), seen):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_zero_ablating_one_head_equals_a_hand_written_ablation(
    bus: hookbus.EventBus, implementation: str
) -> None:
    # The reference: zero head 1's slice of c_proj's input (TL's hook_z ablation).
    model = gpt2(implementation)
    d_head = 16

    def zero_head(module: nn.Module, args: Any) -> Any:
        z = args[0].clone()
        z[..., d_head : 2 * d_head] = 0
        return (z,)

    handle = model.transformer.h[0].attn.c_proj.register_forward_pre_hook(zero_head)
    with torch.no_grad():
        expected = model(TOKENS).logits
        plain = None
    handle.remove()
    operation = "matmul.1" if implementation == "eager" else "scaled_dot_product_attention.0"

    def ablate(ctx: CallContext) -> None:
        z = ctx.result.clone()  # [batch, head, position, d_head]
        z[:, 1] = 0
        ctx.result = z

    with hookbus.torch.attach(model, bus) as net, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the other implementation's name
        net.operations("transformer.h.0.attn", "matmul", "scaled_dot_product_attention")
        bus.post(f"transformer.h.0.attn:{operation}", ablate)
        with torch.no_grad():
            logits = model(TOKENS).logits
    with torch.no_grad():
        plain = model(TOKENS).logits
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-6)
    assert not torch.allclose(plain, expected)  # the ablation changed something


def test_hand_written_model_pre_post_and_around_see_and_replace(bus: hookbus.EventBus) -> None:
    net_model = Net()
    order: List[str] = []

    def flat_scores(ctx: CallContext) -> None:
        order.append(f"pre {ctx.name}")
        ctx.args = (torch.zeros_like(ctx.args[0]),)

    def around(ctx: CallContext) -> Iterator[None]:
        order.append("around in")
        yield
        order.append("around out")
        ctx.result = ctx.result * 2

    def hand(original: Callable[..., Any]) -> Callable[..., Any]:
        def softmax(scores: torch.Tensor, dim: int) -> torch.Tensor:
            return original(torch.zeros_like(scores), dim=dim) * 2

        return softmax

    with patched(torch, "softmax", hand):
        expected = net_model(X)
    with hookbus.torch.attach(net_model, bus) as net:
        net.operations("attn", torch.softmax)
        net.pre("attn:softmax.0", flat_scores)
        bus.around("attn:softmax.0", around)
        got = net_model(X)
    assert order == ["around in", "pre attn:softmax.0", "around out"]
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(net_model(X), Net()(X), rtol=0, atol=0)  # all gone


def test_call_indices_and_gradients_flow_through_a_replaced_result(
    bus: hookbus.EventBus,
) -> None:
    model = Net()
    reference = copy.deepcopy(model)
    calls: List[str] = []
    with hookbus.torch.attach(model, bus) as net:
        selection = net.operations("attn", "matmul")
        bus.pre("attn:matmul.*", lambda ctx: calls.append(ctx.name))

        def halve(ctx: CallContext) -> None:
            ctx.result = ctx.result * 0.5

        bus.post("attn:matmul.1", halve)
        model(X).sum().backward()
        assert selection.names == ["attn:matmul.0", "attn:matmul.1"]
    assert calls == ["attn:matmul.0", "attn:matmul.1"]

    def hand(original: Callable[..., Any]) -> Callable[..., Any]:
        count = [0]

        def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            count[0] += 1
            out = original(a, b)
            return out * 0.5 if count[0] == 2 else out

        return matmul

    with patched(torch, "matmul", hand):
        reference(X).sum().backward()
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=0, atol=1e-6, msg=name)


def test_skip_replaces_the_operation(bus: hookbus.EventBus) -> None:
    model = Net()
    with hookbus.torch.attach(model, bus) as net:
        net.operations("attn", "softmax")

        def uniform(ctx: CallContext) -> None:
            scores = ctx.args[0]
            ctx.skip(torch.full_like(scores, 1 / scores.shape[-1]))

        with bus.pre("attn:softmax.0", uniform):
            got = model(X)

    def hand(original: Callable[..., Any]) -> Callable[..., Any]:
        return lambda scores, dim: torch.full_like(scores, 1 / scores.shape[-1])

    with patched(torch, "softmax", hand):
        expected = model(X)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


# --- zero cost and cleanup -------------------------------------------------------------


def torch_function_modes() -> int:
    return int(torch._C._len_torch_function_stack())


def armed(model: nn.Module) -> List[str]:
    """The modules that hold an operation site's native hooks."""
    return [
        name
        for name, module in model.named_modules()
        for hook in [*module._forward_pre_hooks.values(), *module._forward_hooks.values()]
        if type(getattr(hook, "__self__", None)).__name__ == "OperationSite"
    ]


def test_no_native_hook_and_no_mode_without_a_matching_hook(bus: hookbus.EventBus) -> None:
    model = gpt2("sdpa")
    before = hook_state(model)
    net = hookbus.torch.attach(model, bus)
    net.operations("transformer.h.*.attn", "scaled_dot_product_attention")
    assert hook_state(model) != before  # armed for the forward that finds the calls
    model(TOKENS)
    assert hook_state(model) == before  # found them; no hook matches: native speed
    handle = bus.post("transformer.h.*", lambda ctx: None)  # a module pattern, no colon
    assert not armed(model)  # matches "...attn:scaled_dot_product_attention.0", yet skips it
    handle.remove()
    with bus.post("transformer.h.1.attn:scaled_dot_product_attention.0", lambda ctx: None):
        assert armed(model) == ["transformer.h.1.attn", "transformer.h.1.attn"]
        model(TOKENS)
        assert torch_function_modes() == 0
    assert hook_state(model) == before
    net.detach()
    assert hook_state(model) == before


def test_detach_and_remove_restore_everything(bus: hookbus.EventBus) -> None:
    model = Net()
    before = hook_state(model)
    net = hookbus.torch.attach(model, bus)
    selection = net.operations("attn", "softmax")
    fired: List[str] = []
    bus.post("attn:softmax.0", lambda ctx: fired.append(ctx.name))
    model(X)
    selection.remove()
    model(X)
    assert fired == ["attn:softmax.0"]
    assert hook_state(model) == before
    net.operations("attn", "softmax")
    model(X)
    net.detach()
    model(X)
    assert len(fired) == 2
    assert hook_state(model) == before
    assert bus.points() == [] or all(p.kind != "operation" for p in bus.points())


def test_an_error_in_forward_or_in_a_hook_leaves_no_mode(bus: hookbus.EventBus) -> None:
    model = Net()
    net = hookbus.torch.attach(model, bus)
    net.operations("attn", "softmax")

    def fail(ctx: CallContext) -> None:
        raise KeyError("boom")

    with bus.post("attn:softmax.0", fail), pytest.raises(KeyError, match="boom"):
        model(X)
    assert torch_function_modes() == 0
    seen: List[str] = []
    bus.exception("attn:softmax.0", lambda ctx: seen.append(type(ctx.exception).__name__))
    with pytest.raises(RuntimeError):
        model(torch.ones(2, 5, 3))  # wrong width: qkv raises before softmax
    with pytest.raises(IndexError):
        torch.softmax(torch.ones(2), dim=5)  # outside the module: no hook
    assert torch_function_modes() == 0
    assert seen == []
    net.detach()


def test_an_interrupted_forward_leaves_a_mode_that_fires_nothing_and_is_cleaned(
    bus: hookbus.EventBus,
) -> None:
    model = Net()
    net = hookbus.torch.attach(model, bus)
    net.operations("attn", "softmax")
    fired: List[str] = []
    bus.post("attn:softmax.0", lambda ctx: fired.append(ctx.name))

    def interrupt(module: nn.Module, args: Any) -> None:
        raise KeyboardInterrupt

    # A plain torch pre hook of the module itself, after the site's: forward never runs,
    # so neither torch nor the module's forward swap sees the interrupt go by.
    handle = model.attn.register_forward_pre_hook(interrupt)
    with pytest.raises(KeyboardInterrupt):
        model(X)
    handle.remove()
    assert torch_function_modes() == 1  # torch runs no always_call hook on BaseException
    torch.softmax(torch.ones(3), dim=0)  # outside the module: the stale mode fires nothing
    assert fired == []
    model(X)  # the next forward cleans up
    assert torch_function_modes() == 0
    assert fired == ["attn:softmax.0"]
    net.detach()


def test_a_copy_carries_no_operation_hook(bus: hookbus.EventBus) -> None:
    model = Net()
    net = hookbus.torch.attach(model, bus)
    net.operations("attn", "softmax")
    fired: List[str] = []
    bus.post("attn:softmax.0", lambda ctx: fired.append(ctx.name))
    twin = copy.deepcopy(model)
    twin(X)
    assert fired == []
    assert torch_function_modes() == 0
    assert not twin.attn._forward_pre_hooks
    assert not twin.attn._forward_hooks
    net.detach()


# --- names and errors --------------------------------------------------------------------


def test_names_errors_and_the_discovery_warning(bus: hookbus.EventBus) -> None:
    model = Net()
    net = hookbus.torch.attach(model, bus)
    with pytest.raises(ValueError, match="select them first"):
        net.post("attn:softmax.0", lambda ctx: None)
    net.operations("attn", "softmax", "conv2d")
    with pytest.raises(ValueError, match="grad hooks do not apply"):
        net.grad("attn:softmax.0", lambda ctx: None)
    with pytest.raises(ValueError, match=r"close names: 'attn:softmax\.0'"):
        net.post("attn:sofmax.0", lambda ctx: None)
    with pytest.raises(TypeError, match="at least one operation"):
        net.operations("attn")
    with pytest.raises(TypeError, match="cannot select the operation int"):
        net.operations("attn", 3)
    with pytest.warns(RuntimeWarning, match="'attn' called no conv2d"):
        model(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(X)  # once only
    net.detach()


def test_nested_selections_see_the_same_call_inner_first(bus: hookbus.EventBus) -> None:
    model = Net()
    net = hookbus.torch.attach(model, bus)
    net.operations(["<root>", "attn"], "softmax")
    order: List[str] = []
    bus.post("*:softmax.0", lambda ctx: order.append(ctx.name))
    model(X)
    assert order == ["<root>:softmax.0", "attn:softmax.0"]
    net.detach()


def test_removal_from_inside_a_hook_and_threads_leave_no_mode(bus: hookbus.EventBus) -> None:
    model = Net()
    before = hook_state(model)
    net = hookbus.torch.attach(model, bus)
    selection = net.operations("attn", "softmax")
    bus.post("attn:softmax.0", lambda ctx: selection.remove())
    model(X)  # the hook removes the selection mid-forward; the post hook still pops the mode
    assert torch_function_modes() == 0
    assert hook_state(model) == before
    net.operations("attn", "matmul")
    counts: List[int] = []
    bus.post("attn:matmul.*", lambda ctx: counts.append(1))
    errors: List[BaseException] = []

    def work() -> None:
        try:
            for _ in range(20):
                model(X)
            assert torch_function_modes() == 0
        except BaseException as error:  # reported in the main thread
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert len(counts) == 3 * 20 * 2
    net.detach()
    assert hook_state(model) == before


def test_disarmed_and_armed_again_during_a_call_keeps_one_pair_of_hooks(
    bus: hookbus.EventBus,
) -> None:
    model = Net()
    before = hook_state(model)
    net = hookbus.torch.attach(model, bus)
    net.operations("attn", "softmax")
    fired: List[str] = []

    def swap(ctx: CallContext) -> None:
        handle.remove()  # disarms the site while its post hook still has a mode to pop
        bus.post("attn:softmax.0", lambda ctx: fired.append("second"))  # arms it again

    model(X)  # finds the calls: from now on the site is armed only while hooks match
    handle = bus.post("attn:softmax.0", swap)
    model(X)
    model(X)
    assert fired == ["second"]
    assert sorted(armed(model)) == ["attn", "attn"]  # one pre and one post hook
    net.detach()
    assert hook_state(model) == before


# --- GPT-2 counterparts of the hand-written checks above: each holds on both models -------


def test_gpt2_sdpa_pre_and_around_replace_like_a_monkeypatch(bus: hookbus.EventBus) -> None:
    model = gpt2("sdpa")
    sdpa = "scaled_dot_product_attention"

    def hand(original: Callable[..., Any]) -> Callable[..., Any]:
        calls = [0]

        def attention(query: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            calls[0] += 1  # block 0's call is the first of the forward
            if calls[0] == 1:
                return original(query * 2, *args, **kwargs) * 0.5
            return original(query, *args, **kwargs)

        return attention

    with torch.no_grad(), patched(F, sdpa, hand):
        expected = model(TOKENS).logits

    def sharper(ctx: CallContext) -> None:
        ctx.args = (ctx.args[0] * 2, *ctx.args[1:])

    def halve(ctx: CallContext) -> Iterator[None]:
        yield
        ctx.result = ctx.result * 0.5

    with hookbus.torch.attach(model, bus) as net:
        net.operations("transformer.h.0.attn", sdpa)
        net.pre(f"transformer.h.0.attn:{sdpa}.0", sharper)
        net.around(f"transformer.h.0.attn:{sdpa}.0", halve)
        with torch.no_grad():
            got = model(TOKENS).logits
    with torch.no_grad():
        plain = model(TOKENS).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert not torch.allclose(got, plain)


def test_gpt2_skip_of_an_operation_equals_a_monkeypatch(bus: hookbus.EventBus) -> None:
    model = gpt2("sdpa")
    sdpa = "scaled_dot_product_attention"

    def mean_of_values(value: torch.Tensor) -> torch.Tensor:
        # Every query attends to every value equally: the mean over positions.
        return value.mean(dim=-2, keepdim=True).expand_as(value)

    def hand(original: Callable[..., Any]) -> Callable[..., Any]:
        return lambda query, key, value, **kwargs: mean_of_values(value)

    with torch.no_grad(), patched(F, sdpa, hand):
        expected = model(TOKENS).logits
    with hookbus.torch.attach(model, bus) as net:
        net.operations("transformer.h.*.attn", sdpa)
        net.pre(f"*:{sdpa}.0", lambda ctx: ctx.skip(mean_of_values(ctx.args[2])))
        with torch.no_grad():
            got = model(TOKENS).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_gpt2_gradients_flow_through_a_replaced_pattern(bus: hookbus.EventBus) -> None:
    model = gpt2("eager")
    reference = gpt2("eager")

    def hand(original: Callable[..., Any]) -> Callable[..., Any]:
        calls = [0]

        def softmax(*args: Any, **kwargs: Any) -> torch.Tensor:
            calls[0] += 1
            out = original(*args, **kwargs)
            return out * 0.5 if calls[0] == 1 else out  # block 0's pattern

        return softmax

    def halve(ctx: CallContext) -> None:
        ctx.result = ctx.result * 0.5

    with hookbus.torch.attach(model, bus) as net:
        net.operations("transformer.h.0.attn", "softmax")
        net.post("transformer.h.0.attn:softmax.0", halve)
        model(TOKENS).logits.pow(2).sum().backward()
    with patched(F, "softmax", hand):
        reference(TOKENS).logits.pow(2).sum().backward()
    for (name, got), want in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=0, atol=1e-6, msg=name)
    assert model.transformer.h[0].attn.c_attn.weight.grad.abs().sum() > 0


def test_a_misspelled_operation_is_named_with_the_torch_function_it_is_close_to(
    bus: hookbus.EventBus,
) -> None:
    model = Net()
    net = hookbus.torch.attach(model, bus)
    net.operations("attn", "sofmax", "matmull")
    with pytest.warns(RuntimeWarning, match=r"did you mean 'matmul' and 'softmax'\?"):
        model(X)
    net.detach()


class _MatmulByOperator(nn.Module):
    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return (a @ a.T) * a.sum() + a.sum()


def test_operators_are_reported_by_the_function_name_and_the_warning_says_so(
    bus: hookbus.EventBus,
) -> None:
    model = nn.Sequential(_MatmulByOperator())
    net = hookbus.torch.attach(model, bus)
    selection = net.operations("0", "matmul", "mul", "add")
    model(torch.ones(2, 2))
    assert selection.names == ["0:add.0", "0:matmul.0", "0:mul.0"]
    selection.remove()
    net.operations("0", "__matmul__")
    with pytest.warns(RuntimeWarning) as caught:
        model(torch.ones(2, 2))
    message = str(caught[0].message)
    assert "did you mean 'matmul'?" in message
    assert "a @ b are 'matmul'" in message
    net.detach()


# --- names that exist, and calls counted right --------------------------------------------


class TwoTanh(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(2):
            x = torch.tanh(x)
        return x


def test_a_hook_on_a_call_index_the_forward_never_reached_is_refused() -> None:
    """After the discovery forward the points are known: ``tanh.3`` of a forward that calls
    ``tanh`` twice is a typo, refused with the names that exist, as a module typo is."""
    model = nn.Sequential()
    model.add_module("loop", TwoTanh())
    net = hookbus.torch.attach(model, hookbus.EventBus())
    selection = net.operations("loop", torch.tanh)
    model(torch.ones(2))  # the discovery forward
    assert selection.names == ["loop:tanh.0", "loop:tanh.1"]
    with pytest.raises(ValueError, match=r"loop:tanh\.1"):
        net.pre("loop:tanh.3", lambda ctx: None)
    net.detach()


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.inner(x))


def test_torch_calls_of_a_module_hook_do_not_renumber_the_forward_s_operations() -> None:
    """A logging hook on a submodule that calls ``torch.tanh`` must not become ``tanh.0``:
    the ablation registered on ``tanh.0`` edits the forward's own tanh, whatever the
    hooks of its submodules compute."""
    torch.manual_seed(0)
    model = nn.Sequential(Block())
    net = hookbus.torch.attach(model, hookbus.EventBus())
    net.operations("0", torch.tanh)
    x = torch.ones(1, 2)
    model(x)  # the discovery forward

    def ablate(ctx: CallContext) -> None:
        ctx.args = (torch.zeros_like(ctx.args[0]), *ctx.args[1:])

    logged: List[Any] = []
    net.pre("0:tanh.0", ablate)
    net.post("0.inner", lambda ctx: logged.append(torch.tanh(ctx.result).sum().item()))
    out = model(x)
    assert torch.equal(out, torch.zeros(1, 2))  # tanh(0): the forward's tanh was ablated
    assert len(logged) == 1
    net.detach()


class Nested(nn.Module):
    """tanh twice in one forward: once in a submodule's forward, once in its own."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(2, 2), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.inner(x))


def test_only_the_forward_s_own_calls_are_numbered_whatever_hooks_call() -> None:
    """Hooks of every kind that call ``torch.tanh`` inside the selected module's call (a
    pre hook on the module itself, post hooks on its submodules, an ``every_module`` hook,
    a capture) leave the numbering alone: the forward's two calls stay ``tanh.0`` and
    ``tanh.1``, and an edit of ``tanh.1`` matches the same edit written in raw torch."""
    torch.manual_seed(0)
    model = nn.Sequential(Nested())
    net = hookbus.torch.attach(model, hookbus.EventBus())
    selection = net.operations("0", torch.tanh)
    x = torch.randn(3, 2)
    calls: List[str] = []

    def noisy(ctx: CallContext) -> None:
        torch.tanh(torch.ones(1))
        calls.append(ctx.name)

    net.pre("0", noisy)
    net.post("0.inner", noisy)
    net.post("0.inner.1", noisy)
    with hookbus.torch.every_module(hookbus.EventBus()) as every:
        every.post(noisy)
        with hookbus.torch.capture(model, "0.inner"):
            model(x)  # the discovery forward
            assert selection.names == ["0:tanh.0", "0:tanh.1"]

            def halve(ctx: CallContext) -> None:
                ctx.args = (ctx.args[0] * 0.5, *ctx.args[1:])

            net.pre("0:tanh.1", halve)
            out = model(x)
    linear = model[0].inner[0]
    expected = torch.tanh(0.5 * torch.tanh(linear(x)))
    assert torch.allclose(out, expected, atol=1e-6, rtol=0)
    assert selection.names == ["0:tanh.0", "0:tanh.1"]
    assert {"0", "0.inner", "0.inner.1", "<modules>"} <= set(calls)  # every hook ran
    net.detach()


def _loop_after_discovery() -> Any:
    model = nn.Sequential()
    model.add_module("loop", TwoTanh())
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    net.operations("loop", torch.tanh)
    model(torch.ones(2))  # the discovery forward
    return model, bus, net


@pytest.mark.parametrize("how", ["skipped by another bus", "patched"])
def test_the_discovery_forward_is_the_first_whose_forward_ran(how: str) -> None:
    """A forward skipped by another bus's pre hook, or replaced by ``patch``, calls none of
    its operations: it tells nothing of which exist, so the discovery waits for one that
    runs (no warning that tanh is never called, no refusal of its call indices)."""
    model = nn.Sequential()
    model.add_module("loop", TwoTanh())
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    selection = net.operations("loop", torch.tanh)
    undo: List[Any] = []
    if how == "patched":
        undo.append(hookbus.torch.patch(model, {"loop": torch.zeros(2)}, "loop"))
    else:
        other = hookbus.torch.attach(model, hookbus.EventBus())
        other.pre("loop", lambda ctx: ctx.skip(torch.zeros(2)), once=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert model(torch.ones(2)).tolist() == [0.0, 0.0]
    assert selection.names == []
    seen: List[str] = []
    net.post("loop:tanh.1", lambda ctx: seen.append(ctx.name))  # still a call that may exist
    for each in undo:
        each.remove()
    model(torch.ones(2))
    assert selection.names == ["loop:tanh.0", "loop:tanh.1"]
    assert seen == ["loop:tanh.1"]
    with pytest.raises(ValueError, match="called tanh 2 times"):
        net.post("loop:tanh.2", lambda ctx: None)  # discovered now
    net.detach()


def test_a_call_index_the_forward_never_reached_is_refused_on_the_bus_too() -> None:
    _, bus, net = _loop_after_discovery()

    def span(ctx: CallContext) -> Iterator[None]:
        yield

    for kind, hook in (("pre", print), ("post", print), ("exception", print), ("around", span)):
        with pytest.raises(ValueError, match=r"'loop:tanh\.0', 'loop:tanh\.1'"):
            getattr(bus, kind)("loop:tanh.2", hook)
    assert bus.hooks() == []
    bus.post("loop:tanh.1", lambda ctx: None)  # one that exists
    net.detach()


def test_optional_accepts_a_call_index_a_later_forward_may_reach() -> None:
    """A forward whose loop length depends on its input may call an operation more often
    later; ``optional=True`` registers a hook for that call before it exists."""
    model, bus, net = _loop_after_discovery()
    seen: List[str] = []
    net.post("loop:tanh.2", lambda ctx: seen.append(ctx.name), optional=True)
    bus.post("loop:tanh.3", lambda ctx: seen.append(ctx.name), optional=True)
    model(torch.ones(2))
    assert seen == []
    net.detach()


def test_a_call_index_is_accepted_before_the_discovery_forward() -> None:
    """Before the discovery forward the calls are not known: any index is accepted."""
    model = nn.Sequential()
    model.add_module("loop", TwoTanh())
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    net.operations("loop", torch.tanh)
    handle = net.pre("loop:tanh.3", lambda ctx: None)
    assert handle.active
    net.detach()


@pytest.mark.parametrize("strict", [False, True])
def test_an_event_hook_on_an_operation_point_s_name_is_refused_on_any_bus(strict: bool) -> None:
    """An operation point runs pre, post, exception and around hooks only, and its name is
    no event's: as for a declared event's name, a hook that could never run there is
    refused at registration, on a plain bus too, saying which kinds run there."""
    model = nn.Sequential()
    model.add_module("loop", TwoTanh())
    bus = hookbus.EventBus(strict=strict)
    net = hookbus.torch.attach(model, bus)
    net.operations("loop", torch.tanh)
    model(torch.ones(2))  # the discovery forward: the points exist
    with pytest.raises(hookbus.UnknownNameError, match=r"use pre, post, exception or around"):
        bus.on("loop:tanh.1", print)
    assert bus.hooks() == []
    bus.on("loop:tanh.*", print)  # a pattern names no place: check_pending() reports it
    net.detach()


class TanhThenInterrupted(nn.Module):
    def forward(self, x: object) -> None:
        torch.tanh(torch.ones(1))
        raise KeyboardInterrupt


class TwoTanhOfOnes(nn.Module):
    def forward(self, x: object) -> torch.Tensor:
        return torch.tanh(torch.tanh(torch.ones(1)))


def _interrupts(ctx: CallContext) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("where", ["forward", "a once hook"])
def test_a_keyboard_interrupt_in_a_forward_with_operation_points_leaves_no_mode_behind(
    where: str,
) -> None:
    """torch runs no hook for a ``KeyboardInterrupt``, so the post hook that pops the
    operation mode never runs: the module's forward swap pops it instead, also when the
    interrupt comes from a ``once`` hook whose claim left no hook to run. Nothing is left
    on the thread's torch function stack, and the call's argument is let go of at once,
    even when no hook is left to run at the module's next forward (the collector is off)."""

    class Argument:
        pass

    model = nn.Sequential()
    model.add_module("loop", TanhThenInterrupted() if where == "forward" else TwoTanhOfOnes())
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    net.operations("loop", torch.tanh)
    if where == "forward":
        handle = bus.pre("loop:tanh.0", lambda ctx: None)
    else:
        model(None)  # the discovery forward
        handle = bus.pre("loop:tanh.1", _interrupts, once=True)
    argument = Argument()
    alive = weakref.ref(argument)
    depth = torch._C._len_torch_function_stack()
    gc.disable()
    try:
        with pytest.raises(KeyboardInterrupt):
            model(argument)
        del argument
        assert torch._C._len_torch_function_stack() == depth, "a mode was left behind"
        assert alive() is None, "the argument of an interrupted call outlived it"
    finally:
        gc.enable()
        handle.remove()
        net.detach()
