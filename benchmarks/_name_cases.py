"""Row 13: names of the vocabulary on row 7's GPT-2, against the same hooks written by hand.

The model is row 7's tiny random ``GPT2LMHeadModel`` (4 layers, width 128, 4 heads,
16 tokens), under ``no_grad`` with one torch thread, at batch 1 and batch 16.

* idle: a model with the names on a bus (``hookbus.torch.vocabulary``), no hook on
  any name, against a model never attached;
* ``hook_z``: zeroing head 1 of every block, ``bus.post("blocks.*.attn.hook_z", ...)``,
  against a native forward pre hook on each ``attn.c_proj`` that views its input as
  heads and zeroes that slice;
* ``hook_pattern`` (eager attention): every block's pattern stored in a dict,
  against ``F.softmax`` swapped for a storing wrapper during each attention's
  forward (a pre hook swaps it in, a post hook puts it back).
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List

from _gpt2_cases import build
from _harness import Case
from _operation_cases import HandPatch
from _suite import Line
from _torch_cases import _Forward

BATCHES = (1, 16)
HEAD = 1


def _zero_head_by_hand(module: Any, args: Any) -> Any:
    x = args[0]
    heads = x.unflatten(-1, (4, -1)).clone()
    heads[:, :, HEAD] = 0
    return (heads.flatten(-2), *args[1:])


def _zero_head(ctx: Any) -> None:
    z = ctx.result.clone()
    z[:, :, HEAD] = 0
    ctx.result = z


def cases() -> List[Case]:
    import torch

    import hookbus
    import hookbus.torch

    found: List[Case] = []
    base, x = build()
    for batch in BATCHES:
        ids = x.repeat(batch, 1)
        named = copy.deepcopy(base)
        hookbus.torch.vocabulary(named, hookbus.EventBus())
        found += [
            Case(f"names idle b{batch}/bare", "forward()", {"forward": _Forward(base, ids)}),
            Case(f"names idle b{batch}/named", "forward()", {"forward": _Forward(named, ids)}),
        ]
        hand, hooked = copy.deepcopy(base), copy.deepcopy(base)
        for block in hand.transformer.h:
            block.attn.c_proj.register_forward_pre_hook(_zero_head_by_hand)
        bus = hookbus.EventBus()
        hookbus.torch.vocabulary(hooked, bus)
        bus.post("blocks.*.attn.hook_z", _zero_head)
        assert torch.equal(_Forward(hand, ids)().logits, _Forward(hooked, ids)().logits)
        found += [
            Case(f"names z b{batch}/hand", "forward()", {"forward": _Forward(hand, ids)}),
            Case(f"names z b{batch}/hookbus", "forward()", {"forward": _Forward(hooked, ids)}),
        ]
        eager = copy.deepcopy(base)
        eager.config._attn_implementation = "eager"
        hand, hooked = copy.deepcopy(eager), copy.deepcopy(eager)
        patterns: Dict[str, Any] = {}
        for block in hand.transformer.h:
            HandPatch(block.attn, "softmax", patterns)
        bus = hookbus.EventBus()
        hookbus.torch.vocabulary(hooked, bus)
        bus.post(
            "blocks.*.attn.hook_pattern",
            lambda ctx, patterns=patterns: patterns.__setitem__(ctx.name, ctx.result),
        )
        found += [
            Case(f"names pattern b{batch}/hand", "forward()", {"forward": _Forward(hand, ids)}),
            Case(
                f"names pattern b{batch}/hookbus", "forward()", {"forward": _Forward(hooked, ids)}
            ),
        ]
    return found


def lines() -> List[Line]:
    row = "13. GPT-2 names vocabulary"
    found: List[Line] = []
    for batch in BATCHES:
        bare, named = f"names idle b{batch}/bare", f"names idle b{batch}/named"
        found += [
            Line(row, f"floor (batch {batch}): a forward of a model never attached", bare, bare),
            Line(
                row,
                f"**hookbus** (batch {batch}) `vocabulary(model, bus)`, no hook on a name",
                named,
                bare,
                "<= 1.02x (no measurable cost)",
                lambda r, named=named, bare=bare: r.ratio(named, bare).median <= 1.02,
            ),
        ]
        for what, hand_label, hooked_label in (
            ("z", "a pre hook on each `c_proj` zeroing head 1's slice",
             "`bus.post('blocks.*.attn.hook_z', ...)` zeroing head 1"),
            ("pattern", "`F.softmax` monkeypatched during each attention, into a dict (eager)",
             "`bus.post('blocks.*.attn.hook_pattern', ...)` into a dict (eager)"),
        ):  # fmt: skip
            hand, hooked = f"names {what} b{batch}/hand", f"names {what} b{batch}/hookbus"
            found += [
                Line(row, f"floor (batch {batch}): {hand_label}", hand, hand),
                Line(
                    row,
                    f"**hookbus** (batch {batch}) {hooked_label}",
                    hooked,
                    hand,
                    "<= 1.15x by hand",
                    lambda r, hooked=hooked, hand=hand: r.ratio(hooked, hand).median <= 1.15,
                ),
            ]
    return found
