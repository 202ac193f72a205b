"""Row 8: a hook point on an operation inside a GPT-2 attention, against a monkeypatch.

The model is row 7's tiny random ``GPT2LMHeadModel`` (4 layers, width 128), run on
CPU under ``no_grad`` with one torch thread, once with the ``sdpa`` attention and
once with the ``eager`` one. The hook reads one operation's output of the first
block's attention into a dict: ``F.scaled_dot_product_attention`` (sdpa) or the
attention pattern, ``F.softmax`` (eager). The hand-written twin is what a user
writes without hookbus: a native forward pre hook on the attention that swaps the
function in ``torch.nn.functional`` for a wrapper that stores its output, and a
post hook that puts it back. The last line compares a forward of a model whose
operations were selected, with no hook registered, to one never attached.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List

from _gpt2_cases import build
from _harness import Case
from _suite import Line
from _torch_cases import _Forward

_FUNCTIONS = {"sdpa": "scaled_dot_product_attention", "eager": "softmax"}


class HandPatch:
    """The monkeypatch: ``F.<name>`` replaced during one module's forward, by hand.

    The wrapper calls the function there when the patch was made; the post hook puts
    back the one the pre hook replaced, as ``old = F.softmax; F.softmax = new; ...;
    F.softmax = old`` does. Putting back the function saved when the patch was made
    would undo, for the whole process, any swap made since by other code: in one run
    of every row, row 8's patches would drop the dispatchers that row 13's
    ``hook_pattern`` installs later, making its hooked cases fall back to a torch
    function mode that no row 13 case sets up (see ``_name_cases._pair``).
    """

    def __init__(self, module: Any, name: str, outputs: Dict[str, Any]) -> None:
        import torch.nn.functional as F

        self.functional = F
        self.name = name
        self.original: Callable[..., Any] = getattr(F, name)
        self.replaced: Callable[..., Any] = self.original
        original = self.original

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            outputs["out"] = out
            return out

        self.wrapper = wrapper
        module.register_forward_pre_hook(self.swap)
        module.register_forward_hook(self.restore, always_call=True)

    def swap(self, module: Any, args: Any) -> None:
        self.replaced = getattr(self.functional, self.name)
        setattr(self.functional, self.name, self.wrapper)

    def restore(self, module: Any, args: Any, output: Any) -> None:
        setattr(self.functional, self.name, self.replaced)


def _model(implementation: str) -> Any:
    model, x = build()
    model.config._attn_implementation = implementation
    return model, x


def cases() -> List[Case]:
    import hookbus
    import hookbus.torch

    found: List[Case] = []
    for implementation, function in _FUNCTIONS.items():
        base, x = _model(implementation)
        hand, hooked = copy.deepcopy(base), copy.deepcopy(base)
        outputs: Dict[str, Any] = {}
        HandPatch(hand.transformer.h[0].attn, function, outputs)
        bus = hookbus.EventBus()
        net = hookbus.torch.attach(hooked, bus)
        net.operations("transformer.h.0.attn", function)
        bus.post(
            f"transformer.h.0.attn:{function}.0",
            lambda ctx, outputs=outputs: outputs.__setitem__("out", ctx.result),
        )
        found += [
            Case(f"ops {implementation}/hand", "forward()", {"forward": _Forward(hand, x)}),
            Case(f"ops {implementation}/hookbus", "forward()", {"forward": _Forward(hooked, x)}),
        ]
    bare, x = _model("sdpa")
    selected = copy.deepcopy(bare)
    net = hookbus.torch.attach(selected, hookbus.EventBus())
    net.operations("transformer.h.*.attn", "scaled_dot_product_attention")
    _Forward(selected, x)()  # the forward that finds the calls
    found += [
        Case("ops idle/bare", "forward()", {"forward": _Forward(bare, x)}),
        Case("ops idle/selected", "forward()", {"forward": _Forward(selected, x)}),
    ]
    return found


def lines() -> List[Line]:
    row = "8. GPT-2 operation hook point"
    found: List[Line] = []
    for implementation, function in _FUNCTIONS.items():
        hand, hooked = f"ops {implementation}/hand", f"ops {implementation}/hookbus"
        found += [
            Line(
                row,
                f"floor ({implementation}): monkeypatched `F.{function}` during "
                f"`h.0.attn`'s forward, output into a dict",
                hand,
                hand,
            ),
            Line(
                row,
                f"**hookbus** ({implementation}) `bus.post('transformer.h.0.attn:"
                f"{function}.0', ...)`",
                hooked,
                hand,
                "<= 1.2x monkeypatch",
                lambda r, hooked=hooked, hand=hand: r.ratio(hooked, hand).median <= 1.2,
            ),
        ]
    return [
        *found,
        Line(row, "floor: a forward of a model never attached", "ops idle/bare", "ops idle/bare"),
        Line(
            row,
            "**hookbus** operations selected on every attention, no hook registered",
            "ops idle/selected",
            "ops idle/bare",
            "<= 1.02x (no measurable cost)",
            lambda r: r.ratio("ops idle/selected", "ops idle/bare").median <= 1.02,
        ),
    ]
