"""Smaller wrong results, each reproduced on the old code (issue 10, item 6).

The DDP graph-cut warning needs 2 processes: see test_training_stacks.py.
"""

from __future__ import annotations

import gc
from typing import Any, List

import pytest
import torch
from torch import nn
from torch_helpers import TutorialNet

import hookbus
import hookbus.torch


def _glob_named() -> nn.ModuleDict:
    return nn.ModuleDict({"a[0]": nn.Linear(2, 2), "a0": nn.Linear(2, 3), "b*": nn.Identity()})


def test_capture_records_modules_whose_names_hold_glob_characters() -> None:
    model = _glob_named()
    with hookbus.torch.capture(model, nn.Linear) as cache:
        model["a[0]"](torch.ones(1, 2))
        model["a0"](torch.ones(1, 2))
    assert list(cache) == ["a[0]", "a0"]
    assert [len(cache["a[0]"]), len(cache["a0"])] == [1, 1]
    assert [cache["a[0]"].output.shape, cache["a0"].output.shape] == [(1, 2), (1, 3)]


@pytest.mark.parametrize("selector", ["a[0]", "module", "type"])
def test_a_name_from_the_model_is_matched_literally(selector: str) -> None:
    model = _glob_named()
    net = hookbus.torch.attach(model, hookbus.EventBus())
    seen: List[str] = []
    chosen: Any = {"a[0]": "a[0]", "module": model["a[0]"], "type": [model["a[0]"]]}[selector]
    net.post(chosen, lambda ctx: seen.append(ctx.name))
    model["a0"](torch.ones(1, 2))
    model["a[0]"](torch.ones(1, 2))
    assert seen == ["a[0]"]
    assert net.select("b*") == ["b*"]  # the name, not every name starting with b
    assert net.select("a?") == ["a0"]  # a pattern that is no name still matches names
    net.detach()


def _tensors_reachable_from(root: Any) -> List[torch.Tensor]:
    """Every tensor the object graph of ``root`` holds, found without hookbus's traversal."""
    found: List[torch.Tensor] = []
    seen = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, nn.Module)):
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            found.append(obj)
        else:
            stack.extend(gc.get_referents(obj))
    return found


def test_a_detached_capture_of_gpt2_stores_no_tensor_that_requires_grad() -> None:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64
    )
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 100, (2, 8))
    with hookbus.torch.capture(model, ["<root>", "transformer", "transformer.h.*"]) as cache:
        out = model(ids, use_cache=True)
    cached = cache["<root>"].output.past_key_values
    assert type(cached).__name__ == "DynamicCache"
    assert cached is not out.past_key_values  # a snapshot, not the live cache
    stored = _tensors_reachable_from(cache)
    assert len(stored) > 10
    assert not [t for t in stored if t.requires_grad]
    assert torch.equal(cached.layers[0].keys, out.past_key_values.layers[0].keys)


def test_a_detached_capture_cuts_tensors_in_plain_objects_and_keeps_cycles() -> None:
    class Holder:
        def __init__(self, tensor: torch.Tensor) -> None:
            self.tensor = tensor
            self.me = self
            self.label = "kept"

    class Out(nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return Holder(x * 2)

    model = nn.Sequential(Out())
    x = torch.ones(2, requires_grad=True)
    with hookbus.torch.capture(model, "0") as cache:
        live = model(x)
    stored = cache["0"].output
    assert live.tensor.requires_grad
    assert not stored.tensor.requires_grad
    assert stored.me is stored
    assert stored.label == "kept"


def test_the_detached_attachment_says_it_is_detached() -> None:
    model = TutorialNet()
    net = hookbus.torch.attach(model, hookbus.EventBus())
    net.detach()
    for call in (
        lambda: net.module("fc1"),
        lambda: net.select("fc1"),
        lambda: net.name_of(nn.Linear(1, 1)),
        lambda: net.post("fc1", lambda ctx: None),
    ):
        with pytest.raises(RuntimeError, match=r"attachment of TutorialNet .* is detached"):
            call()


def test_a_captured_model_output_is_a_working_copy_of_its_own_class() -> None:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=16)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 50, (1, 4))
    with hookbus.torch.capture(model, ["<root>", "transformer"], grads=True) as cache:
        live = model(ids, labels=ids, use_cache=False)
        live.loss.backward()
    stored = cache["<root>"].output
    assert type(stored) is type(live)
    assert list(stored.keys()) == list(live.keys()) == ["loss", "logits"]
    assert stored.logits is stored["logits"] is stored[1]  # attribute and item: one tensor
    assert stored.to_tuple()[0] is stored.loss
    assert stored.past_key_values is None
    assert stored.hidden_states is None
    assert torch.equal(stored.logits, live.logits)
    assert not stored.logits.requires_grad
    assert not stored.loss.requires_grad
    assert stored is not live
    assert stored.logits is not live.logits
    stored.logits = torch.zeros(1)  # the copy keeps ModelOutput's own attribute/item sync
    assert stored["logits"] is stored.logits
    grad = cache["transformer"].grad  # a ModelOutput of gradients, in the output's shape
    assert type(grad) is type(cache["transformer"].output)
    assert grad.last_hidden_state.shape == cache["transformer"].output.last_hidden_state.shape
    assert torch.equal(cache["<root>"].grad.loss, torch.tensor(1.0))
    with hookbus.torch.capture(model, "<root>", grads=True) as cache:
        model(ids, labels=ids, use_cache=False)  # no backward: no gradient arrives
    missing = cache["<root>"].grad
    assert type(missing) is type(stored)
    assert list(missing.keys()) == []
    assert missing.loss is None
    assert missing.logits is None


@pytest.mark.parametrize(
    ("selector", "expected"),
    [("a[0]", ["a[0]"]), ("a?", ["a0"]), ("*", ["a[0]", "a0", "b*"]), ("b*", ["b*"])],
)
def test_a_capture_by_name_or_glob_records_exactly_what_it_selects(
    selector: str, expected: List[str]
) -> None:
    model = _glob_named()
    with hookbus.torch.capture(model, selector, grads=True) as cache:
        model["a[0]"](torch.ones(1, 2, requires_grad=True)).sum().backward()
        model["a0"](torch.ones(1, 2, requires_grad=True)).sum().backward()
        model["b*"](torch.ones(1, 2, requires_grad=True)).sum().backward()
    assert list(cache) == expected
    assert all(cache[name].grad is not None for name in expected)
    assert not any(m._forward_hooks for m in model.modules())
