"""Guaranteed cleanup, no leaked references, threads, and importing without torch."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
import weakref
from typing import Any, List

import pytest
import torch
from torch import nn
from torch_helpers import TutorialNet, hook_state, native_hooks

import hookbus
import hookbus.torch
from hookbus import CallContext


def test_detach_restores_the_hook_dicts_exactly_with_users_own_hooks_kept() -> None:
    net = TutorialNet()
    own = net.fc1.register_forward_hook(lambda m, i, o: None)
    before = hook_state(net)
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(net, bus)
    attached.pre("*", lambda ctx: None)
    attached.post("*", lambda ctx: None)
    attached.exception("*", lambda ctx: None)
    attached.grad(nn.Linear, lambda ctx: None)
    attached.backward_pre("fc2", lambda ctx: None)
    attached.backward("fc2", lambda ctx: None)
    bus.post("relu", lambda ctx: None)  # registered on the bus directly, by name
    net(torch.ones(1, 2, requires_grad=True)).sum().backward()
    assert native_hooks(net)
    attached.detach()
    assert hook_state(net) == before
    attached.detach()  # idempotent
    assert [h.name for h in bus.hooks()] == ["relu"]
    own.remove()


def test_leaving_a_scope_removes_native_hooks_even_when_forward_raises() -> None:
    net = TutorialNet()
    before = hook_state(net)
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(net, bus)

    def run_in_scope() -> None:
        with bus.scope():
            bus.pre("fc1", lambda ctx: None)
            attached.post(nn.Linear, lambda ctx: None)
            attached.exception("*", lambda ctx: None)
            net(torch.ones(1, 3))  # wrong shape

    with pytest.raises(RuntimeError):
        run_in_scope()
    assert hook_state(net) == before
    assert bus.hooks() == []


def test_handle_removal_and_attachment_context_manager() -> None:
    net = TutorialNet()
    before = hook_state(net)
    with hookbus.torch.attach(net, hookbus.EventBus()) as attached:
        with attached.post("fc1", lambda ctx: None):
            assert native_hooks(net) == {"fc1": 1}
        assert hook_state(net) == before
        attached.post("fc2", lambda ctx: None)
    assert hook_state(net) == before


def test_no_references_to_modules_or_activations_after_removal() -> None:
    net = TutorialNet()
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(net, bus)
    refs: List[Any] = []

    def keep_ref(ctx: CallContext) -> None:
        refs.append(weakref.ref(ctx.result))

    attached.pre("*", lambda ctx: None)
    attached.post("*", keep_ref)
    attached.grad("*", lambda ctx: None)
    attached.exception("*", lambda ctx: None)
    attached.backward("fc1", lambda ctx: None)
    out = net(torch.ones(1, 2, requires_grad=True))
    out.sum().backward()
    with pytest.raises(RuntimeError):
        net(torch.ones(1, 3))  # an error mid-forward leaves no per-call state behind
    with hookbus.torch.capture(net, "*", inputs=True, grads=True) as cache:
        net(torch.ones(1, 2, requires_grad=True)).sum().backward()
    assert len(cache) == 5
    attached.detach()
    module_refs = [weakref.ref(m) for m in net.modules()]
    del net, out, cache, attached
    gc.collect()
    assert all(ref() is None for ref in module_refs)
    assert refs
    assert all(ref() is None for ref in refs)


@pytest.mark.parametrize("inputs", [False, True])
def test_a_capture_keeps_neither_the_model_nor_activations_once_dropped(inputs: bool) -> None:
    net = TutorialNet()
    x = torch.ones(1, 2)
    capture = hookbus.torch.capture(net, inputs=inputs)
    with capture as cache:
        out = net(x)
    stored = weakref.ref(cache["fc1"].output)
    model_ref, x_ref = weakref.ref(net), weakref.ref(x)
    gc.disable()  # freed by reference counting alone: no cycle holds them
    try:
        del net, out
        assert model_ref() is None  # the ended capture holds no module
        del cache, capture, x
        assert stored() is None
        assert x_ref() is None
    finally:
        gc.enable()


def test_a_graph_kept_after_a_grads_capture_holds_no_record_and_records_no_grad() -> None:
    net = TutorialNet()
    with hookbus.torch.capture(net, "fc1", grads=True) as cache:
        out = net(torch.ones(1, 2, requires_grad=True))
    stored = weakref.ref(cache["fc1"].output)
    out.sum().backward(retain_graph=True)  # after the capture ended
    assert cache["fc1"].grad is None
    gc.disable()
    try:
        del cache
        assert stored() is None  # the graph, still alive, kept none of the capture's records
    finally:
        gc.enable()
    assert out.grad_fn is not None


def test_an_attachment_dropped_without_detach_keeps_working_then_dies_with_the_model() -> None:
    bus = hookbus.EventBus()
    net = TutorialNet()
    hookbus.torch.attach(net, bus)  # the Attachment object is dropped at once
    gc.collect()
    calls: List[str] = []
    bus.post("fc1", lambda ctx: calls.append(ctx.name))
    net(torch.ones(1, 2))
    assert calls == ["fc1"]
    model_ref = weakref.ref(net)
    del net
    gc.collect()
    assert model_ref() is None
    assert bus.registry.points("fc1") == []


def test_two_threads_run_separate_models_attached_to_one_bus() -> None:
    bus = hookbus.EventBus()
    models = [TutorialNet(), TutorialNet()]
    for index, model in enumerate(models):
        hookbus.torch.attach(model, bus, prefix=f"m{index}")
    counts = {"m0.fc1": 0, "m1.fc1": 0}
    lock = threading.Lock()

    def count(ctx: CallContext) -> None:
        with lock:
            counts[ctx.name] += 1
        ctx.result = ctx.result * 1.0

    bus.pre("m*.fc2", lambda ctx: None)
    bus.post("m*.fc1", count)
    errors: List[BaseException] = []

    def run(model: nn.Module) -> None:
        try:
            for _ in range(200):
                out = model(torch.full((1, 2), 0.1))
                assert abs(out.item() - 3.4) < 1e-5
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(m,)) for m in models]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert counts == {"m0.fc1": 200, "m1.fc1": 200}


def test_threads_capture_one_model_concurrently_like_dataparallel_replicas() -> None:
    net = TutorialNet()
    with hookbus.torch.capture(net, "fc2") as cache:
        threads = [
            threading.Thread(target=lambda: [net(torch.ones(1, 2)) for _ in range(100)])
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert len(cache["fc2"]) == 200
    assert [call.index for call in cache["fc2"].calls] == list(range(200))


def test_import_hookbus_does_not_import_torch() -> None:
    code = "import sys, hookbus; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_import_hookbus_torch_without_torch_says_how_to_install() -> None:
    code = textwrap.dedent(
        """
        import sys

        class HideTorch:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, HideTorch())
        import hookbus
        try:
            import hookbus.torch
        except ImportError as error:
            print(error)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert "pip install torch" in result.stdout
    assert 'pip install -e ".[torch]"' in result.stdout  # hookbus is not on PyPI


def test_a_removed_hook_is_not_kept_by_its_attachment() -> None:
    # Issue 10, item 2: `with net.post(...)`, the documented way to hook for a while,
    # left every hook (and what its closure holds) in the attachment until detach().
    net = TutorialNet()
    attached = hookbus.torch.attach(net, hookbus.EventBus())

    class Payload:
        pass

    refs = []
    for selector in ("fc1", net.fc2, nn.Linear, ["relu", "fc1"]):
        payload = Payload()
        refs.append(weakref.ref(payload))

        def hook(ctx: CallContext, payload: Payload = payload) -> None:
            pass

        with attached.post(selector, hook):
            net(torch.ones(1, 2))
        del hook, payload
    gc.disable()
    try:
        assert [ref() for ref in refs] == [None] * 4
    finally:
        gc.enable()
    assert attached.active
    attached.detach()


def test_temporary_hooks_on_an_attachment_do_not_grow_memory() -> None:
    import tracemalloc

    net = TutorialNet()
    attached = hookbus.torch.attach(net, hookbus.EventBus())

    def cycle() -> None:
        ballast = bytearray(256)
        with attached.post("fc1", lambda ctx, ballast=ballast: None):
            pass

    for _ in range(200):  # warm-up: caches and interned names
        cycle()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(5_000):
            cycle()
        gc.collect()
        growth = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert growth < 64 * 1024, f"{growth} bytes kept over 5,000 temporary hooks"
    attached.detach()
