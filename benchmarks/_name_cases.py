"""Row 13: names of the vocabulary on row 7's GPT-2, against the same hooks written by hand.

The model is row 7's tiny random ``GPT2LMHeadModel`` (4 layers, width 128, 4 heads,
16 tokens), under ``no_grad`` with one torch thread, at batch 1 and batch 16.

* idle: a model attached with names (``attach(model, bus, names="transformer")``),
  no hook on any name, against a model never attached;
* ``hook_z``: zeroing head 1 of every block, ``bus.post("blocks.*.attn.hook_z", ...)``,
  against a native forward pre hook on each ``attn.c_proj`` that views its input as
  heads and zeroes that slice;
* ``hook_pattern`` under eager attention: every block's pattern stored in a dict,
  against ``F.softmax`` swapped for a storing wrapper during each attention's
  forward (a pre hook swaps it in, a post hook puts it back);
* ``hook_pattern`` under sdpa attention, where no pattern exists in the forward:
  against ``F.scaled_dot_product_attention`` swapped the same way for a wrapper that
  computes the pattern from its arguments (the scores, the causal mask, the softmax)
  and stores it before running the original.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List, Tuple

from _gpt2_cases import build
from _harness import Case
from _operation_cases import HandPatch
from _suite import Line
from _torch_cases import _Forward

BATCHES = (1, 16)
HEAD = 1
ROW = "13. GPT-2 names vocabulary"


def _zero_head_by_hand(module: Any, args: Any) -> Any:
    x = args[0]
    heads = x.unflatten(-1, (4, -1)).clone()
    heads[:, :, HEAD] = 0
    return (heads.flatten(-2), *args[1:])


def _zero_head(ctx: Any) -> None:
    z = ctx.result.clone()
    z[:, :, HEAD] = 0
    ctx.result = z


class HandSdpaPattern(HandPatch):
    """``F.scaled_dot_product_attention`` swapped during one attention's forward for a
    wrapper that stores the pattern it computes from the arguments, by hand."""

    def __init__(self, module: Any, outputs: Dict[str, Any]) -> None:
        super().__init__(module, "scaled_dot_product_attention", {})
        import torch

        original = self.original

        def wrapper(
            query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
            is_causal: bool = False, scale: Any = None, **kwargs: Any,
        ) -> Any:  # fmt: skip
            factor = scale if scale is not None else query.shape[-1] ** -0.5
            scores = query @ key.transpose(-1, -2) * factor
            if is_causal:
                keep = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
                scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
            if attn_mask is not None:
                scores = (
                    scores.masked_fill(~attn_mask, torch.finfo(scores.dtype).min)
                    if attn_mask.dtype == torch.bool
                    else scores + attn_mask
                )
            outputs["out"] = scores.softmax(-1)
            return original(
                query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                is_causal=is_causal, scale=scale, **kwargs,
            )  # fmt: skip

        self.wrapper = wrapper


def _named(model: Any) -> Any:
    import hookbus
    import hookbus.torch

    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus, names="transformer")
    return bus


def _pair(
    base: Any, ids: Any, implementation: str, hand_hook: Callable[[Any, Dict[str, Any]], Any]
) -> Tuple[Any, Any]:
    """The model with the pattern stored by hand, and with a hook on ``hook_pattern``.

    The hook goes first: hookbus swaps ``F.softmax`` and ``F.scaled_dot_product_attention``
    for dispatchers while it is on, and a hand-written swap made before would put back
    the function it saved, dropping the dispatcher at each of its calls (hookbus then
    falls back to a torch function mode, correct but slower). Made after, the hand swap
    saves and puts back the dispatcher, which costs its calls a test of an empty list.
    """
    model = copy.deepcopy(base)
    model.config._attn_implementation = implementation
    hand, hooked = copy.deepcopy(model), copy.deepcopy(model)
    patterns: Dict[str, Any] = {}
    _named(hooked).post(
        "blocks.*.attn.hook_pattern",
        lambda ctx, patterns=patterns: patterns.__setitem__(ctx.name, ctx.result),
    )
    for block in hand.transformer.h:
        hand_hook(block.attn, patterns)
    return _Forward(hand, ids), _Forward(hooked, ids)


def cases() -> List[Case]:
    import torch

    found: List[Case] = []
    base, x = build()
    for batch in BATCHES:
        ids = x.repeat(batch, 1)
        named = copy.deepcopy(base)
        _named(named)
        found += [
            Case(f"names idle b{batch}/bare", "forward()", {"forward": _Forward(base, ids)}),
            Case(f"names idle b{batch}/named", "forward()", {"forward": _Forward(named, ids)}),
        ]
        hand, hooked = copy.deepcopy(base), copy.deepcopy(base)
        for block in hand.transformer.h:
            block.attn.c_proj.register_forward_pre_hook(_zero_head_by_hand)
        _named(hooked).post("blocks.*.attn.hook_z", _zero_head)
        assert torch.equal(_Forward(hand, ids)().logits, _Forward(hooked, ids)().logits)
        found += [
            Case(f"names z b{batch}/hand", "forward()", {"forward": _Forward(hand, ids)}),
            Case(f"names z b{batch}/hookbus", "forward()", {"forward": _Forward(hooked, ids)}),
        ]
        for implementation, hand_hook in (
            ("eager", lambda module, out: HandPatch(module, "softmax", out)),
            ("sdpa", HandSdpaPattern),
        ):
            by_hand, by_name = _pair(base, ids, implementation, hand_hook)
            key = f"names pattern {implementation} b{batch}"
            found += [
                Case(f"{key}/hand", "forward()", {"forward": by_hand}),
                Case(f"{key}/hookbus", "forward()", {"forward": by_name}),
            ]
    return found


def lines() -> List[Line]:
    found: List[Line] = []
    for batch in BATCHES:
        bare, named = f"names idle b{batch}/bare", f"names idle b{batch}/named"
        found += [
            Line(ROW, f"floor (batch {batch}): a forward of a model never attached", bare, bare),
            Line(
                ROW,
                f"**hookbus** (batch {batch}) `attach(model, bus, names='transformer')`, no "
                f"hook on a name",
                named,
                bare,
                "<= 1.02x (no measurable cost)",
                lambda r, named=named, bare=bare: r.ratio(named, bare).median <= 1.02,
            ),
        ]
        for what, hand_label, hooked_label in (
            ("z", "a pre hook on each `c_proj` zeroing head 1's slice",
             "`bus.post('blocks.*.attn.hook_z', ...)` zeroing head 1"),
            ("pattern eager", "`F.softmax` monkeypatched during each attention, into a dict",
             "`bus.post('blocks.*.attn.hook_pattern', ...)` into a dict (eager)"),
            ("pattern sdpa", "`F.scaled_dot_product_attention` monkeypatched during each "
             "attention, computing the pattern into a dict",
             "`bus.post('blocks.*.attn.hook_pattern', ...)` into a dict (sdpa)"),
        ):  # fmt: skip
            hand, hooked = f"names {what} b{batch}/hand", f"names {what} b{batch}/hookbus"
            found += [
                Line(ROW, f"floor (batch {batch}): {hand_label}", hand, hand),
                Line(
                    ROW,
                    f"**hookbus** (batch {batch}) {hooked_label}",
                    hooked,
                    hand,
                    "<= 1.15x by hand",
                    lambda r, hooked=hooked, hand=hand: r.ratio(hooked, hand).median <= 1.15,
                ),
            ]
    return found
