"""Names of the vocabulary against TransformerLens 4 on the same weights.

Each name hookbus gives a GPT-2, a Llama (GQA) and a GPT-NeoX (parallel blocks)
is compared with the value of the same name in TransformerLens's cache
(``TransformerBridge.boot_transformers(..., hf_model=...)``), under eager and sdpa
attention on hookbus's side. Skipped where TransformerLens is not installed, unless
``HOOKBUS_REQUIRE_TRANSFORMER_LENS`` is set: then its absence fails the tests. CI
installs it on Python 3.11 only, in a venv of its own, and sets that variable (see
CONTRIBUTING.md, "The TransformerLens test").

Offline, TransformerLens boots from a folder holding the model's config and a
tokenizer saved there and loaded back; booting rewrites the model it is given, so
it gets a copy.
"""

from __future__ import annotations

import copy
import importlib
import os
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest
import torch
from transformer_models import IMPLEMENTATIONS, tiny_model, tokens

import hookbus
import hookbus.torch

pytestmark = pytest.mark.torch

ARCHITECTURES = ("gpt2", "llama", "gpt_neox")

NOT_IN_TRANSFORMER_LENS: Dict[str, Tuple[str, ...]] = {
    "gpt2": (),
    "llama": (),
    # TransformerLens 4.3.0 never fires these on GPT-NeoX (its rotary is applied out of
    # the hooks' sight); hookbus reads them from the attention's operations.
    "gpt_neox": tuple(f"blocks.{n}.attn.hook_rot_{x}" for n in (0, 1) for x in "qk"),
}
"""The names hookbus has that TransformerLens 4.3.0's cache lacks, per architecture."""

TOLERANCE: Dict[str, Any] = dict(atol=1e-4, rtol=1e-4)

REQUIRED = "HOOKBUS_REQUIRE_TRANSFORMER_LENS"
"""Set (to anything but empty): a missing module fails the tests instead of skipping them."""


def _module(name: str) -> Any:
    """``name`` imported; a skip without it, or an ``ImportError`` where it is required."""
    if os.environ.get(REQUIRED):
        return importlib.import_module(name)
    return pytest.importorskip(name)


def test_a_missing_module_skips_unless_it_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REQUIRED, raising=False)
    with pytest.raises(pytest.skip.Exception):
        _module("hookbus_no_such_module")
    monkeypatch.setenv(REQUIRED, "1")
    with pytest.raises(ImportError, match="hookbus_no_such_module"):
        _module("hookbus_no_such_module")


def _tokenizer(folder: Path) -> Any:
    """A word-level tokenizer of the models' 100 tokens, saved to ``folder`` and loaded."""
    tokenizers = _module("tokenizers")
    transformers = _module("transformers")
    vocab = {f"t{i}": i for i in range(100)}
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="t0"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    special = dict(unk_token="t0", pad_token="t0", bos_token="t0", eos_token="t0")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=model, **special)
    fast.save_pretrained(folder)
    return transformers.PreTrainedTokenizerFast.from_pretrained(folder)


@pytest.fixture(scope="module", params=ARCHITECTURES)
def transformer_lens_cache(
    request: Any, tmp_path_factory: pytest.TempPathFactory
) -> Tuple[str, Dict[str, torch.Tensor]]:
    """``(arch, TransformerLens's cache of one forward of tokens())`` per architecture."""
    bridge_module = _module("transformer_lens.model_bridge")
    arch: str = request.param
    folder = tmp_path_factory.mktemp(arch)
    model = tiny_model(arch, "eager")
    model.config.save_pretrained(folder)
    offline = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"  # the folder has all it needs: never reach the hub
    try:
        bridge = bridge_module.TransformerBridge.boot_transformers(
            str(folder), hf_model=copy.deepcopy(model), tokenizer=_tokenizer(folder)
        )
    finally:
        if offline is None:
            del os.environ["HF_HUB_OFFLINE"]
        else:
            os.environ["HF_HUB_OFFLINE"] = offline
    bridge.set_use_attn_result(True)  # hook_result, off by default in TransformerLens
    with torch.no_grad():
        logits, cache = bridge.run_with_cache(tokens())
        torch.testing.assert_close(logits, model(tokens()).logits, **TOLERANCE)
    return arch, dict(cache.items())


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_every_name_holds_the_value_transformer_lens_holds(
    transformer_lens_cache: Tuple[str, Dict[str, torch.Tensor]], impl: str
) -> None:
    arch, theirs = transformer_lens_cache
    model = tiny_model(arch, impl)  # the same weights: the same seed
    bus = hookbus.EventBus()
    names = hookbus.torch.attach(model, bus, names="transformer").vocabulary
    assert names is not None
    ours: Dict[str, torch.Tensor] = {}
    handles = [
        bus.post(name, lambda ctx: ours.__setitem__(ctx.name, ctx.result.detach()))
        for name in names.names
    ]
    try:
        with torch.no_grad():
            model(tokens())
    finally:  # a pattern hook holds F.softmax's swap until it is removed
        for handle in handles:
            handle.remove()
    assert set(ours) == set(names.names)
    missing = sorted(set(names.names) - set(theirs))
    assert missing == sorted(NOT_IN_TRANSFORMER_LENS[arch])
    compared = [name for name in names.names if name in theirs]
    for name in compared:
        value, expected = ours[name], theirs[name]
        assert value.shape == expected.shape, name
        if name.endswith("hook_attn_scores"):  # masked positions: each side's own minimum
            kept = expected > torch.finfo(expected.dtype).min / 2
            assert torch.equal(kept, value > torch.finfo(value.dtype).min / 2), name
            value, expected = value[kept], expected[kept]
        torch.testing.assert_close(value, expected.to(value.dtype), **TOLERANCE, msg=name)
