"""Row 14: the same tasks by name in hookbus and in TransformerLens 4, against raw torch hooks.

Row 7's tiny random ``GPT2LMHeadModel`` (4 layers, width 128, 4 heads, 16 tokens),
under ``no_grad`` with one torch thread, at batch 1 and batch 16. The floor of each
task is the same work written with raw torch hooks on the model as Hugging Face
built it (sdpa attention, its default); hookbus works on that model, attached with
``names="transformer"``; TransformerLens 4.3.0 boots a ``TransformerBridge`` from a
copy (it puts its own components in place of the model's and runs eager attention),
from a local folder holding the config and a word-level tokenizer. Skipped where
TransformerLens is not installed.

* idle: a forward with nothing hooked;
* cache: each block's ``hook_resid_post`` stored, set up for that one forward
  (``capture(model, "blocks.*.hook_resid_post")``, ``run_with_cache(names_filter=)``,
  four ``register_forward_hook`` calls and their removal);
* z: head 1 of every block zeroed through ``hook_z`` (hooks left in place);
* pattern: every block's ``hook_pattern`` stored (hooks left in place; by hand, the
  pattern computed from ``F.scaled_dot_product_attention``'s arguments);
* patch: position 1 of block 1's ``hook_resid_post`` replaced by a stored one.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import tempfile
from typing import Any, Callable, Dict, List, Optional

from _gpt2_cases import build
from _harness import Case
from _name_cases import HandSdpaPattern, _zero_head_by_hand
from _suite import Line
from _torch_cases import _Forward

BATCHES = (1, 16)
ROW = "14. GPT-2 names next to TransformerLens 4"
TASKS = ("idle", "cache", "z", "pattern", "patch")


def unavailable() -> Optional[str]:
    """Why this row can't run here, or None."""
    if importlib.util.find_spec("transformer_lens") is None:
        return "transformer_lens is not installed (pip install torch==2.13.0 transformer-lens)"
    return None


def _bridge(model: Any) -> Any:
    """TransformerLens's bridge around a copy of ``model``, booted offline."""
    import tokenizers
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import PreTrainedTokenizerFast

    folder = tempfile.mkdtemp(prefix="hookbus-bench-tl-")
    vocab = {f"t{i}": i for i in range(model.config.vocab_size)}
    words = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="t0"))
    words.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    special = dict(unk_token="t0", pad_token="t0", bos_token="t0", eos_token="t0")
    PreTrainedTokenizerFast(tokenizer_object=words, **special).save_pretrained(folder)
    model.config.save_pretrained(folder)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(folder)
    return TransformerBridge.boot_transformers(
        folder, hf_model=copy.deepcopy(model), tokenizer=tokenizer
    )


class _Call:
    """``function(x)`` under no_grad: the statement the harness times."""

    def __init__(self, function: Callable[[Any], Any], x: Any) -> None:
        import torch

        self.function, self.x, self.no_grad = function, x, torch.no_grad

    def __call__(self) -> Any:
        with self.no_grad():
            return self.function(self.x)


def _zero_head(ctx: Any) -> None:
    z = ctx.result.clone()
    z[:, :, 1] = 0
    ctx.result = z


def _zero_head_tl(z: Any, hook: Any) -> Any:
    z = z.clone()
    z[:, :, 1] = 0
    return z


def _cases_at(base: Any, bridges: Dict[str, Any], ids: Any, batch: int) -> List[Case]:
    import torch

    import hookbus
    import hookbus.torch

    found: List[Case] = []

    def add(task: str, hand: Any, hooked: Any, lens: Any) -> None:
        for who, run in (("hand", hand), ("hookbus", hooked), ("tl", lens)):
            found.append(Case(f"tl {task} b{batch}/{who}", "forward()", {"forward": run}))

    named = copy.deepcopy(base)
    bus = hookbus.EventBus()
    hookbus.torch.attach(named, bus, names="transformer")
    add("idle", _Forward(base, ids), _Forward(named, ids), _Call(bridges["idle"], ids))

    def hand_cache(x: Any) -> Any:
        store: Dict[int, Any] = {}
        handles = [
            block.register_forward_hook(
                lambda m, a, o, i=i: store.__setitem__(i, (o[0] if isinstance(o, tuple) else o))
            )
            for i, block in enumerate(base.transformer.h)
        ]
        try:
            return base(x)
        finally:
            for handle in handles:
                handle.remove()

    def hookbus_cache(x: Any) -> Any:
        with hookbus.torch.capture(base, "blocks.*.hook_resid_post"):
            return base(x)

    def lens_cache(x: Any) -> Any:
        return bridges["cache"].run_with_cache(
            x, names_filter=lambda n: n.endswith("hook_resid_post")
        )

    add("cache", _Call(hand_cache, ids), _Call(hookbus_cache, ids), _Call(lens_cache, ids))

    hand = copy.deepcopy(base)
    for block in hand.transformer.h:
        block.attn.c_proj.register_forward_pre_hook(_zero_head_by_hand)
    zeroed = copy.deepcopy(base)
    zbus = hookbus.EventBus()
    hookbus.torch.attach(zeroed, zbus, names="transformer")
    zbus.post("blocks.*.attn.hook_z", _zero_head)
    lens_z = bridges["z"]
    expected = _Forward(hand, ids)().logits
    torch.testing.assert_close(_Forward(zeroed, ids)().logits, expected)
    torch.testing.assert_close(_Call(lens_z, ids)(), expected, atol=1e-4, rtol=1e-4)
    add("z", _Forward(hand, ids), _Forward(zeroed, ids), _Call(lens_z, ids))

    patterns: Dict[str, Any] = {}
    hooked = copy.deepcopy(base)
    pbus = hookbus.EventBus()
    hookbus.torch.attach(hooked, pbus, names="transformer")
    pbus.post("blocks.*.attn.hook_pattern", lambda ctx: patterns.__setitem__(ctx.name, ctx.result))
    hand = copy.deepcopy(base)
    for block in hand.transformer.h:  # after hookbus's hook: see _name_cases._pair
        HandSdpaPattern(block.attn, patterns)
    add("pattern", _Forward(hand, ids), _Forward(hooked, ids), _Call(bridges["pattern"], ids))

    with torch.no_grad(), hookbus.torch.capture(base, "blocks.1.hook_resid_post") as clean:
        base(ids.flip(1))
    stored = clean["blocks.1.hook_resid_post"].output

    def patch_by_hand(module: Any, args: Any, output: Any) -> Any:
        first = output[0] if isinstance(output, tuple) else output
        first = first.clone()
        first[:, 1] = stored[:, 1]
        return (first, *output[1:]) if isinstance(output, tuple) else first

    def patch_tl(resid: Any, hook: Any) -> Any:
        resid = resid.clone()
        resid[:, 1] = stored[:, 1]
        return resid

    hand = copy.deepcopy(base)
    hand.transformer.h[1].register_forward_hook(patch_by_hand)
    patched = copy.deepcopy(base)
    _kept.append(hookbus.torch.patch(patched, {"blocks.1.hook_resid_post": stored}, positions=[1]))
    lens_patch = bridges[f"patch b{batch}"]
    lens_patch.reset_hooks()
    lens_patch.add_hook("blocks.1.hook_resid_post", patch_tl)
    expected = _Forward(hand, ids)().logits
    torch.testing.assert_close(_Forward(patched, ids)().logits, expected)
    torch.testing.assert_close(_Call(lens_patch, ids)(), expected, atol=1e-4, rtol=1e-4)
    add("patch", _Forward(hand, ids), _Forward(patched, ids), _Call(lens_patch, ids))
    return found


_kept: List[Any] = []  # the patches in place while the cases run


def cases() -> List[Case]:
    base, x = build()
    bridges = {task: _bridge(base) for task in ("idle", "cache", "z", "pattern")}
    bridges["z"].add_hook(lambda n: n.endswith("attn.hook_z"), _zero_head_tl)
    patterns: Dict[str, Any] = {}
    bridges["pattern"].add_hook(
        lambda n: n.endswith("hook_pattern"),
        lambda value, hook: patterns.__setitem__(hook.name, value),
    )
    found: List[Case] = []
    for batch in BATCHES:  # each batch patches its own stored value: a bridge of its own
        bridges[f"patch b{batch}"] = _bridge(base)
        found += _cases_at(base, bridges, x.repeat(batch, 1), batch)
    return found


def lines() -> List[Line]:
    found: List[Line] = []
    labels = {
        "idle": "a forward, nothing hooked",
        "cache": "each block's `hook_resid_post`, set up for the forward",
        "z": "head 1 zeroed in every block's `hook_z`",
        "pattern": "every block's `hook_pattern` stored",
        "patch": "position 1 of `blocks.1.hook_resid_post` patched",
    }
    for batch in BATCHES:
        for task in TASKS:
            key = f"tl {task} b{batch}"
            hand = f"{key}/hand"
            found += [
                Line(ROW, f"floor (batch {batch}, {task}): raw torch hooks", hand, hand),
                Line(ROW, f"**hookbus** (batch {batch}): {labels[task]}", f"{key}/hookbus", hand),
                Line(ROW, f"TransformerLens 4 (batch {batch}): the same", f"{key}/tl", hand),
            ]
    return found
