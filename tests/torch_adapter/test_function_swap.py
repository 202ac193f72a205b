"""Function swaps: an attention's ``F.softmax`` and ``F.scaled_dot_product_attention`` seen
without a torch function mode, as a hand-written monkeypatch sees them, and no more.

The names vocabulary reads the attention pattern through them (``hook_pattern``);
each test checks what a user of that name relies on: the calls of that attention's
forward, in this thread, once each, with the model's own functions put back.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any, List

import pytest
import torch
import torch.nn.functional as F
from transformer_models import TOLERANCE, named, reference, tiny_model, tokens

import hookbus
import hookbus.torch
from hookbus.torch import _function_swap

pytestmark = pytest.mark.torch

ORIGINAL_SOFTMAX = F.softmax
ORIGINAL_SDPA = F.scaled_dot_product_attention


def test_the_functions_are_swapped_while_a_pattern_is_hooked_and_put_back_after() -> None:
    _, bus, _ = named("gpt2", "sdpa")
    assert F.softmax is ORIGINAL_SOFTMAX  # names alone swap nothing
    first = bus.post("blocks.0.attn.hook_pattern", print)
    second = bus.post("blocks.1.attn.hook_pattern", print)
    assert F.softmax is not ORIGINAL_SOFTMAX
    assert F.softmax.__name__ == "softmax"  # an operation point selecting it by name works
    assert F.scaled_dot_product_attention.__wrapped__ is ORIGINAL_SDPA  # type: ignore[attr-defined]
    first.remove()
    assert F.softmax is not ORIGINAL_SOFTMAX  # held by the other layer still
    second.remove()
    assert F.softmax is ORIGINAL_SOFTMAX
    assert F.scaled_dot_product_attention is ORIGINAL_SDPA


def test_a_swap_put_back_by_other_code_is_left_as_that_code_set_it() -> None:
    _function_swap.acquire("softmax")
    try:

        def theirs(*args: Any, **kwargs: Any) -> Any:
            return ORIGINAL_SOFTMAX(*args, **kwargs)

        F.softmax = theirs  # type: ignore[assignment]
    finally:
        _function_swap.release("softmax")
    assert F.softmax is theirs
    F.softmax = ORIGINAL_SOFTMAX  # type: ignore[assignment]
    with pytest.raises(ValueError, match="no function 'matmul'"):
        _function_swap.acquire("matmul")


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_calls_outside_the_attention_and_from_other_threads_are_not_seen(impl: str) -> None:
    model, bus, _ = named("llama", impl)
    seen: List[str] = []
    stop = threading.Event()

    def other_thread() -> None:
        x = torch.ones(2, 3)
        while not stop.is_set():
            F.softmax(x, dim=-1)

    def hook(ctx: Any) -> None:
        seen.append(ctx.name)
        F.softmax(ctx.result, dim=-1)  # a hook's own call is no operation of the forward

    thread = threading.Thread(target=other_thread)
    with bus.post("blocks.*.attn.hook_pattern", hook):
        thread.start()
        try:
            for _ in range(3):
                model(tokens())
                F.softmax(torch.ones(3), dim=-1)
        finally:
            stop.set()
            thread.join(timeout=30)
    assert seen == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"] * 3


def test_a_function_swapped_by_hand_before_the_hook_falls_back_to_a_mode() -> None:
    model, bus, _ = named("llama", "eager")
    expected = reference(model, "llama", tokens())
    saved = F.softmax  # code that saved F.softmax before hookbus swapped it

    def by_hand(module: Any, args: Any) -> None:
        F.softmax = saved  # type: ignore[assignment]  # puts back what it saved

    model.model.layers[0].register_forward_pre_hook(by_hand)
    seen: List[torch.Tensor] = []
    with bus.post("blocks.1.attn.hook_pattern", lambda ctx: seen.append(ctx.result)):
        model(tokens())  # the dispatcher is dropped before layer 1's attention runs
        assert F.softmax is saved
    torch.testing.assert_close(seen[0], expected["blocks.1.attn.hook_pattern"], **TOLERANCE)
    assert F.softmax is ORIGINAL_SOFTMAX


def test_a_public_operation_point_on_the_same_softmax_sees_it_once() -> None:
    model, bus, _ = named("gpt2", "eager")
    net = hookbus.torch.attach(model, hookbus.EventBus())
    net.operations("transformer.h.0.attn", "softmax")
    by_name: List[torch.Tensor] = []
    by_operation: List[torch.Tensor] = []
    with (
        bus.post("blocks.0.attn.hook_pattern", lambda ctx: by_name.append(ctx.result)),
        net.bus.post("transformer.h.0.attn:*", lambda ctx: by_operation.append(ctx.result)),
    ):
        model(tokens())
        model(tokens())
    assert len(by_name) == len(by_operation) == 2
    assert net.bus.registry.points("transformer.h.0.attn:softmax.1") == []  # one call, one point
    torch.testing.assert_close(by_name[1], by_operation[1])


def test_a_forward_interrupted_inside_the_attention_leaves_no_call_seen_after_it() -> None:
    model, bus, _ = named("gpt2", "eager")
    seen: List[str] = []

    def interrupt(module: Any, args: Any) -> None:
        raise KeyboardInterrupt  # after the softmax: its module's post hooks never run

    with bus.post("blocks.0.attn.hook_pattern", lambda ctx: seen.append(ctx.name)):
        handle = model.transformer.h[0].attn.c_proj.register_forward_pre_hook(interrupt)
        with pytest.raises(KeyboardInterrupt):
            model(tokens())
        handle.remove()
        assert seen == ["blocks.0.attn.hook_pattern"]
        F.softmax(torch.ones(2, 3), dim=-1)  # no forward runs: not the attention's
        assert seen == ["blocks.0.attn.hook_pattern"]
        model(tokens())
    assert seen == ["blocks.0.attn.hook_pattern"] * 2


def test_an_attention_that_calls_neither_function_is_warned_of_once() -> None:
    transformers = pytest.importorskip("transformers")

    def by_torch_softmax(
        module: Any, query: Any, key: Any, value: Any, mask: Any, scaling: Any = None, **kw: Any
    ) -> Any:  # an attention computed out of the functions' sight, as flash attention is
        repeat = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(repeat, 1), value.repeat_interleave(repeat, 1)
        weights = torch.softmax(query @ key.transpose(-1, -2) * scaling, -1)
        return (weights @ value).transpose(1, 2).contiguous(), weights

    transformers.AttentionInterface.register("hookbus_test_torch_softmax", by_torch_softmax)
    model = tiny_model("llama", "eager")
    model.config._attn_implementation = "hookbus_test_torch_softmax"
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus, names="transformer")
    seen: List[str] = []
    with (
        bus.post("blocks.*.attn.hook_pattern", lambda ctx: seen.append(ctx.name)),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        model(tokens())
        model(tokens())
    messages = [str(warning.message) for warning in caught]
    assert len(messages) == 2  # one per attention, at its first call
    assert "'model.layers.0.self_attn' called neither torch.nn.functional.softmax" in messages[0]
    assert "attn_implementation='eager'" in messages[0]
    assert seen == []


def test_the_functions_are_put_back_when_a_hooked_model_and_its_bus_are_collected() -> None:
    import gc

    def hook_and_drop() -> None:
        _, bus, _ = named("gpt2", "eager")
        bus.post("blocks.0.attn.hook_pattern", print)

    try:
        hook_and_drop()
        gc.collect()
        assert F.softmax is ORIGINAL_SOFTMAX
    finally:  # leave the session as it was, whatever the outcome
        while "softmax" in _function_swap._swaps:
            _function_swap.release("softmax")
        while "scaled_dot_product_attention" in _function_swap._swaps:
            _function_swap.release("scaled_dot_product_attention")


def test_a_hold_collected_while_the_swap_lock_is_taken_is_let_go_of_after() -> None:
    # A finalizer runs wherever the last reference goes, here inside release()'s locked
    # section in this very thread (the swap lock is not reentrant): it must not wait.
    original_relu = F.relu

    class TheirWrapper:  # code that wrapped F.softmax, its wrapper holding a swap
        def __init__(self) -> None:
            self.hold = _function_swap.Hold(["relu"])

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return ORIGINAL_SOFTMAX(*args, **kwargs)

    F.softmax = TheirWrapper()  # type: ignore[assignment]
    _function_swap.acquire("softmax")  # saves their wrapper as the original
    F.softmax = ORIGINAL_SOFTMAX  # type: ignore[assignment]  # they put theirs back
    assert F.relu is not original_relu

    finished = threading.Event()

    def let_go() -> None:
        _function_swap.release("softmax")  # drops the last reference to their wrapper
        finished.set()

    thread = threading.Thread(target=let_go, daemon=True)
    thread.start()
    thread.join(timeout=30)
    try:
        assert finished.is_set(), "release() deadlocked on a hold collected under its lock"
        assert F.relu is original_relu
        assert F.softmax is ORIGINAL_SOFTMAX
        assert "relu" not in _function_swap._swaps
    finally:
        if not finished.is_set():  # unblock the stuck thread (a plain Lock: any thread)
            _function_swap._lock.release()
            thread.join(timeout=30)
        F.softmax = ORIGINAL_SOFTMAX  # type: ignore[assignment]
        F.relu = original_relu


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_a_hooked_attention_lets_go_of_its_arguments_when_its_call_returns(
    implementation: str,
) -> None:
    """Nothing of the pattern's machinery keeps the attention call's frame, and so its
    arguments, alive after the call: not even a reference cycle (the collector is off)."""
    import gc
    import weakref

    model, bus, _ = named("gpt2", implementation)
    attention = model.transformer.h[0].attn  # type: ignore[union-attr]
    seen: List[str] = []
    with bus.post("blocks.0.attn.hook_pattern", lambda ctx: seen.append(ctx.name)):
        gc.disable()
        try:
            for _ in range(2):  # the forward that finds the calls, then a plain one
                hidden = torch.randn(1, 3, model.config.n_embd)
                alive = weakref.ref(hidden)
                with torch.no_grad():
                    attention(hidden)
                del hidden
                assert alive() is None, "the argument of a finished call is still held"
        finally:
            gc.enable()
    assert seen == ["blocks.0.attn.hook_pattern"] * 2
