"""Copies, pickles and saves of hooked models, and of hookbus's own objects.

Hooks are not part of a model's state: a copy carries no bus hook, runs at native
speed, and the original keeps its hooks. Per-process objects refuse pickling
with a message that says what to do instead; captured data pickles.
"""

from __future__ import annotations

import copy
import importlib
import io
import pickle
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable, List

import pytest
import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torch_helpers import TutorialNet, hook_state

import hookbus
import hookbus.torch
from hookbus import CallContext


def _torch_save_load(model: Any) -> Any:
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


COPIES: List[Any] = [
    pytest.param(copy.deepcopy, id="deepcopy"),
    pytest.param(lambda m: pickle.loads(pickle.dumps(m)), id="pickle"),
    pytest.param(_torch_save_load, id="torch.save"),
    pytest.param(lambda m: pickle.loads(ForkingPickler.dumps(m)), id="mp-ForkingPickler"),
    pytest.param(lambda m: AveragedModel(m).module, id="AveragedModel"),
]


def _hook_everything(net: hookbus.torch.Attachment, seen: List[str]) -> None:
    net.pre("*", lambda ctx: seen.append(f"pre {ctx.name}"))
    net.post("*", lambda ctx: seen.append(f"post {ctx.name}"))
    net.exception("*", lambda ctx: seen.append(f"exception {ctx.name}"))
    net.grad("fc1", lambda ctx: seen.append(f"grad {ctx.name}"))
    net.backward("fc2", lambda ctx: seen.append(f"backward {ctx.name}"))
    net.backward_pre("fc2", lambda ctx: seen.append(f"backward_pre {ctx.name}"))


@pytest.mark.parametrize("make_copy", COPIES)
def test_a_copy_of_a_hooked_model_runs_without_hooks_and_the_original_keeps_them(
    make_copy: Callable[[Any], Any],
) -> None:
    model = TutorialNet()
    seen: List[str] = []
    x = torch.tensor([[0.5, -1.0]], requires_grad=True)
    with hookbus.torch.attach(model, hookbus.EventBus()) as net, hookbus.torch.capture(model):
        _hook_everything(net, seen)
        twin = make_copy(model)
        out = twin(x)
        out.sum().backward()
        assert seen == []  # no bus hook reached the copy
        assert torch.equal(out, TutorialNet()(x))
        # The inert stand-ins removed themselves at the first call: native speed.
        assert hook_state(twin) == hook_state(TutorialNet())
        model(x).sum().backward()  # the original still runs every hook
        assert {"post fc1", "grad fc1", "backward fc2"} <= set(seen)
    assert hook_state(model) == hook_state(TutorialNet())


@pytest.mark.parametrize("make_copy", COPIES)
@pytest.mark.parametrize("inputs", [False, True])
def test_a_copy_made_during_a_capture_records_nothing_and_drops_its_stand_ins(
    make_copy: Callable[[Any], Any], inputs: bool
) -> None:
    model = TutorialNet()
    x = torch.ones(1, 2)
    with hookbus.torch.capture(model, inputs=inputs) as cache:
        twin = make_copy(model)
        twin(x)
        assert len(cache) == 0  # the copy's recorders are inert
        assert hook_state(twin) == hook_state(TutorialNet())
        model(x)
    assert list(cache) == ["<root>"] + [name for name, _ in model.named_modules() if name]
    assert hook_state(model) == hook_state(TutorialNet())


def test_a_copy_keeps_the_users_own_hooks_and_torch_s_full_backward_mark() -> None:
    model = TutorialNet()
    calls: List[str] = []
    model.fc1.register_forward_hook(lambda m, a, o: calls.append("user"))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    net.backward("fc1", lambda ctx: None)
    twin = copy.deepcopy(model)
    assert twin.fc1._is_full_backward_hook is True  # still our stand-in's mark
    twin(torch.ones(1, 2, requires_grad=True)).sum().backward()
    assert calls == ["user"]
    assert twin.fc1._is_full_backward_hook is None  # as before hookbus hooked the original
    assert len(twin.fc1._forward_hooks) == 1
    assert not twin.fc1._backward_hooks
    net.detach()


def test_a_copy_pickled_again_before_its_first_call_stays_inert() -> None:
    model = TutorialNet()
    net = hookbus.torch.attach(model, hookbus.EventBus())
    net.post("fc1", lambda ctx: None)
    twice = pickle.loads(pickle.dumps(copy.deepcopy(model)))
    twice(torch.ones(1, 2))
    assert hook_state(twice) == hook_state(TutorialNet())
    net.detach()


def test_ema_through_averaged_model_of_a_hooked_model_matches_the_unhooked_one() -> None:
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    hooked = copy.deepcopy(plain)
    results = []
    for model in (plain, hooked):
        capture = hookbus.torch.capture(model, nn.Linear) if model is hooked else None
        ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        torch.manual_seed(1)
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(5, 3)).pow(2).mean().backward()
            optimizer.step()
            ema.update_parameters(model)
        results.append(ema(torch.ones(2, 3)))
        if capture is not None:
            with capture as cache:
                model(torch.ones(1, 3))
            assert list(cache) == ["0", "2"]
    assert torch.equal(results[0], results[1])


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: hookbus.EventBus("b"), id="EventBus"),
        pytest.param(lambda: hookbus.EventBus("b").on("e", print), id="Handle"),
        pytest.param(
            lambda: hookbus.torch.attach(nn.Linear(1, 1), hookbus.EventBus("b")), id="Attachment"
        ),
    ],
)
@pytest.mark.parametrize("how", [pickle.dumps, copy.deepcopy, copy.copy])
def test_per_process_objects_refuse_pickling_and_copying_saying_what_to_do(
    make: Callable[[], Any], how: Callable[[Any], Any]
) -> None:
    with pytest.raises(TypeError, match=r"cannot be pickled or copied.*worker_init_fn"):
        how(make())


def test_a_grad_handle_refuses_pickling_clearly() -> None:
    y = torch.ones(2, requires_grad=True) * 2
    handle = hookbus.torch.on_grad(y, lambda ctx: None)
    with pytest.raises(TypeError, match="GradHandle cannot be pickled or copied"):
        pickle.dumps(handle)
    handle.remove()


def test_a_cache_pickles_and_saves_with_its_records() -> None:
    model = TutorialNet()
    x = torch.ones(2, 2)
    with hookbus.torch.capture(model, ["fc1", "fc2"], inputs=True, grads=True) as cache:
        model(x).sum().backward()
        model(x)
    for restored in (pickle.loads(pickle.dumps(cache)), _torch_save_load(cache)):
        assert list(restored) == ["fc1", "fc2"]
        assert len(restored["fc1"]) == 2
        assert torch.equal(restored["fc1"].output, cache["fc1"].output)
        assert torch.equal(restored["fc2"].calls[0].grad, cache["fc2"].calls[0].grad)
        assert torch.equal(restored["fc1"].args[0], x)
        with pytest.raises(KeyError, match="was not captured"):
            restored["relu"]
        restored._add("fc1", torch.zeros(1), None, None)  # its lock works again
        assert len(restored["fc1"]) == 3


def test_hooks_in_a_worker_need_the_bus_made_in_the_worker() -> None:
    # What the docs show for DataLoader workers under spawn/forkserver: the model
    # travels without hooks, and worker_init_fn attaches a bus made in the worker.
    model = TutorialNet()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    seen: List[str] = []
    bus.post("fc1", lambda ctx: seen.append(ctx.name))
    in_worker = pickle.loads(pickle.dumps(model))
    in_worker(torch.ones(1, 2))
    assert seen == []
    worker_bus = hookbus.EventBus()
    hookbus.torch.attach(in_worker, worker_bus)

    def record(ctx: CallContext) -> None:
        seen.append(f"worker {ctx.name}")

    worker_bus.post("fc1", record)
    in_worker(torch.ones(1, 2))
    assert seen == ["worker fc1"]


def test_saved_files_name_the_public_package_not_a_private_module() -> None:
    # Moving private modules once broke loading files saved before: they named
    # hookbus.torch._copies and hookbus.torch._stat. What a pickle names is public now.
    import pickletools

    model = nn.Sequential(nn.Linear(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    net.post("0", lambda ctx: None)
    saved = pickle.dumps(model)
    texts = [arg for _, arg, _ in pickletools.genops(saved) if isinstance(arg, str)]
    assert "hookbus.torch" in texts
    assert not [text for text in texts if text.startswith("hookbus.torch._")], texts
    assert hookbus.torch.Moments.__module__ == "hookbus.torch"
    twin = pickle.loads(saved)
    assert len(twin) == 1


# Where files saved before the adapter's modules were cut apart name hookbus's classes
# (a model pickled with hooks, a pickled cache, saved statistics) -> what they load now.
SAVED_NAMES = [
    ("hookbus.torch", "inert_point", "hookbus.torch._point", "inert_point"),
    ("hookbus.torch", "ScriptRefusal", "hookbus.torch._script_refusal", "ScriptRefusal"),
    ("hookbus.torch._patching", "_CopiedForward", "hookbus.torch._forward_swap", "_CopiedForward"),
    (
        "hookbus.torch._capture",
        "inert_capture_hook",
        "hookbus.torch._capture",
        "inert_capture_hook",
    ),
    ("hookbus.torch._generation", "_StepCounter", "hookbus.torch._generation", "_StepCounter"),
    ("hookbus.torch._operations", "inert_site", "hookbus.torch._operations", "inert_site"),
    ("hookbus.torch._capture", "Cache", "hookbus.torch._cache", "Cache"),
    ("hookbus.torch._capture", "Call", "hookbus.torch._cache", "Call"),
    ("hookbus.torch._capture", "Record", "hookbus.torch._cache", "CapturedCalls"),
]


@pytest.mark.parametrize(("module", "name", "now_in", "now"), SAVED_NAMES)
def test_files_saved_before_the_modules_moved_still_load(
    module: str, name: str, now_in: str, now: str
) -> None:
    loaded = pickle.loads(f"c{module}\n{name}\n.".encode())  # what unpickling looks up
    assert loaded is getattr(importlib.import_module(now_in), now)


@pytest.mark.parametrize(("old", "new"), [("Stat", "Moments"), ("Record", "CapturedCalls")])
def test_a_renamed_public_name_still_loads_and_says_its_new_name(old: str, new: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"hookbus\.torch\.{old} is now called .*{new}"):
        loaded = pickle.loads(f"chookbus.torch\n{old}\n.".encode())  # a file saved before
    assert loaded is getattr(hookbus.torch, new)
    with pytest.warns(DeprecationWarning, match=new):
        assert getattr(hookbus.torch, old) is loaded  # code written before
    assert old not in hookbus.torch.__all__
    with pytest.raises(AttributeError, match="no attribute 'Stats_'"):
        hookbus.torch.Stats_  # type: ignore[attr-defined]  # noqa: B018
