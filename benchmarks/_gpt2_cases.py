"""Rows 7 and 8: ``capture()`` of every module of a Hugging Face GPT-2, and one block skipped.

The model is a tiny random ``GPT2LMHeadModel`` (4 layers, width 128: 60 modules),
run on CPU under ``no_grad`` with one torch thread. The hand-written capture is
what a user writes without hookbus: a native ``register_forward_hook`` on every
module that stores the detached output in a dict, and the handles removed after.
Two uses are compared, each side by side with its hand-written twin:

* one capture around one forward (hooks added, one forward, hooks removed), the
  common use: it includes setting up and tearing down the capture;
* forwards inside a capture that stays open (hooks already in place);
* forwards inside one ``capture(model, keep="last")`` left open for the whole run:
  a bounded capture holds one call per module, as the hand-written dict does, so it
  never needs restarting.

Row 9 replaces block 1 by a stored output, against the hand-written instance
``forward`` replacement: a ``ctx.skip`` pre hook on an attached model (against a
replacement left in place), and ``patch()`` around one forward (against setting
and deleting the replacement around it).

Row 10 is what a user who attaches inside each call pays: ``attach(model,
bus).detach()`` per module, on the tests' tiny GPT-2 (2 layers, width 32: 34
modules) and on a deep one (96 layers: 1,256 modules), against the least a hand
hook costs there: ``register_forward_hook`` and ``remove()`` on every module.
Both run with the garbage collector on, as in a user's program (a collection
walks the whole heap, so what allocates per module pays for the big model's
heap there).
"""

from __future__ import annotations

import copy
import gc
import importlib.util
from typing import Any, Dict, List, Optional

from _harness import Case
from _suite import Line
from _torch_cases import _Forward


def unavailable() -> Optional[str]:
    """Why the GPT-2 rows can't run here, or None."""
    if importlib.util.find_spec("transformers") is None:
        return "transformers is not installed"
    return None


def _detached(value: Any) -> Any:
    """``value.detach()``, through the tuples and dicts that some modules return."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (tuple, list)):
        return type(value)(_detached(item) for item in value)  # pyright: ignore
    if isinstance(value, dict):
        return {key: _detached(item) for key, item in value.items()}  # pyright: ignore
    return value


class HandCapture:
    """A capture written by hand: one native forward hook per module, into a dict."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.outputs: Dict[str, Any] = {}
        self.handles: List[Any] = []

    def __enter__(self) -> Dict[str, Any]:
        outputs = self.outputs
        for name, module in self.model.named_modules():

            def store(module: Any, args: Any, output: Any, name: str = name) -> None:
                outputs[name] = _detached(output)

            self.handles.append(module.register_forward_hook(store))
        return outputs

    def __exit__(self, *exc: Any) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []


class _Once:
    """One capture around one forward: ``with capture(model): model(x)``."""

    def __init__(self, capture: Any, model: Any, x: Any) -> None:
        import torch

        self.capture = capture
        self.model = model
        self.x = x
        self.no_grad = torch.no_grad

    def __call__(self) -> Any:
        with self.no_grad(), self.capture(self.model) as cache:
            self.model(self.x)
        return cache


class _Open:
    """A capture started afresh before each sample (untimed), so it never grows large."""

    def __init__(self, capture: Any, model: Any) -> None:
        self.capture = capture
        self.model = model
        self.current: Any = None

    def restart(self) -> None:
        if self.current is not None:
            self.current.__exit__(None, None, None)
        self.current = self.capture(self.model)
        self.current.__enter__()


def build() -> Any:
    """The tiny random GPT-2 and an input of 16 tokens."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=4,
        n_embd=128,
        n_head=4,
        vocab_size=1000,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
    )
    model = GPT2LMHeadModel(config).eval()
    return model, torch.randint(0, config.vocab_size, (1, 16))


class _HandPatchOnce:
    """Hand-written replacement around one forward: set the instance forward, run, delete."""

    def __init__(self, model: Any, x: Any, stored: Any) -> None:
        import torch

        self.model, self.x, self.no_grad = model, x, torch.no_grad
        self.block = model.transformer.h[1]
        self.replacement = lambda *args, **kwargs: stored

    def __call__(self) -> Any:
        block = self.block
        block.forward = self.replacement
        try:
            with self.no_grad():
                return self.model(self.x)
        finally:
            del block.forward


class _PatchOnce:
    """``with patch(model, cache, "transformer.h.1"): model(x)``."""

    def __init__(self, model: Any, x: Any, cache: Any) -> None:
        import torch

        from hookbus.torch import patch

        self.model, self.x, self.cache, self.no_grad = model, x, cache, torch.no_grad
        self.patch = patch

    def __call__(self) -> Any:
        with self.no_grad(), self.patch(self.model, self.cache, "transformer.h.1"):
            return self.model(self.x)


def _skip_cases(base: Any, x: Any) -> List[Case]:
    """Row 9: block 1 of the GPT-2 replaced by a stored output, against doing it by hand."""
    import torch

    import hookbus
    from hookbus.torch import attach, capture

    models = [copy.deepcopy(base) for _ in range(4)]
    with torch.no_grad(), capture(base, "transformer.h.1") as cache:
        base(x)
    stored = cache["transformer.h.1"].output
    models[0].transformer.h[1].forward = lambda *args, **kwargs: stored
    bus = hookbus.EventBus()
    attach(models[1], bus)
    bus.pre("transformer.h.1", lambda ctx: ctx.skip(stored))
    return [
        Case("gpt2 skip/hand", "forward()", {"forward": _Forward(models[0], x)}),
        Case("gpt2 skip/hookbus", "forward()", {"forward": _Forward(models[1], x)}),
        Case("gpt2 patch/hand", "run()", {"run": _HandPatchOnce(models[2], x, stored)}),
        Case("gpt2 patch/hookbus", "run()", {"run": _PatchOnce(models[3], x, cache)}),
    ]


def cases() -> List[Case]:
    from hookbus.torch import capture

    base, x = build()
    models = [copy.deepcopy(base) for _ in range(5)]
    hand_open, hookbus_open = _Open(HandCapture, models[2]), _Open(capture, models[3])
    bounded = capture(models[4], keep="last")
    bounded.__enter__()  # open for the whole run: its memory stays that of one forward
    return [
        *_skip_cases(base, x),
        Case("gpt2 once/hand", "run()", {"run": _Once(HandCapture, models[0], x)}),
        Case("gpt2 once/hookbus", "run()", {"run": _Once(capture, models[1], x)}),
        Case(
            "gpt2 open/hand",
            "forward()",
            {"forward": _Forward(models[2], x), "session": hand_open},
            setup=hand_open.restart,
        ),
        Case(
            "gpt2 open/hookbus",
            "forward()",
            {"forward": _Forward(models[3], x), "session": hookbus_open},
            setup=hookbus_open.restart,
        ),
        Case(
            "gpt2 open/hookbus keep last",
            "forward()",
            {"forward": _Forward(models[4], x), "session": bounded},
        ),
    ]


def _attach_model(n_layer: int) -> Any:
    """A random GPT-2 as the tests build it, with ``n_layer`` blocks."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=n_layer, n_head=2, n_embd=32, vocab_size=100, n_positions=64,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return GPT2LMHeadModel(config).eval()


def _no_op_native(module: Any, args: Any, output: Any) -> None:
    return None


class _WithCollector:
    """Runs ``run`` with the garbage collector on (the harness turns it off)."""

    def __init__(self, run: Any) -> None:
        self.run = run

    def __call__(self) -> None:
        gc.enable()
        try:
            self.run()
        finally:
            gc.disable()


class _HandHooks:
    """The floor: a native forward hook registered and removed on every module."""

    def __init__(self, model: Any) -> None:
        self.modules = list(model.modules())

    def __call__(self) -> None:
        for module in self.modules:
            module.register_forward_hook(_no_op_native).remove()


class _AttachDetach:
    """``attach(model, bus).detach()``: what attaching inside each call costs."""

    def __init__(self, model: Any) -> None:
        import hookbus
        from hookbus.torch import attach

        self.model, self.bus, self.attach = model, hookbus.EventBus(), attach

    def __call__(self) -> None:
        self.attach(self.model, self.bus).detach()


ATTACH_MODELS = (("tiny", 2), ("deep", 96))
"""Row 10's models: (label, number of GPT-2 blocks)."""

_module_counts: Dict[str, int] = {}


def attach_cases() -> List[Case]:
    """Row 10: attach + detach against a native hook added and removed, on every module."""
    cases: List[Case] = []
    for label, n_layer in ATTACH_MODELS:
        model = _attach_model(n_layer)
        _module_counts[label] = len(list(model.modules()))
        for name, run in (("hand", _HandHooks(model)), ("hookbus", _AttachDetach(model))):
            cases.append(Case(f"attach {label}/{name}", "run()", {"run": _WithCollector(run)}))
    return cases


class _PerModule:
    """A case's per-round times divided by its model's module count (read like a Case)."""

    def __init__(self, key: str, samples: List[float]) -> None:
        self.key = key
        self.samples = samples


def derive(results: Any) -> None:
    """Row 10 per module: each attach case's times divided by its model's module count."""
    for label, count in _module_counts.items():
        for name in ("hand", "hookbus"):
            key = f"attach {label}/{name}"
            if results.has(key):
                samples = [value / count for value in results.cases[key].samples]
                results.cases[f"{key} per module"] = _PerModule(f"{key} per module", samples)


def _at_most_us_per_module(key: str, limit_us: float) -> Any:
    return lambda results: results.ns(key).median <= limit_us * 1000


def attach_lines() -> List[Line]:
    row = "10. attach + detach, per module"
    out: List[Line] = []
    for label, n_layer in ATTACH_MODELS:
        count = _module_counts.get(label, 0)
        what = f"{label} GPT-2 ({n_layer} blocks, {count} modules)"
        hand, hookbus = f"attach {label}/hand per module", f"attach {label}/hookbus per module"
        out += [
            Line(
                row,
                f"floor: {what}, `register_forward_hook` + `remove()` on each module",
                hand,
                hand,
            ),
            Line(
                row,
                f"**hookbus** {what}, `attach(model, bus).detach()`",
                hookbus,
                hand,
                "<= 2 us a module",
                _at_most_us_per_module(hookbus, 2.0),
            ),
        ]
    return out


def describe() -> str:
    import transformers

    base, _ = build()
    modules = len(list(base.modules()))
    return (
        f"transformers {transformers.__version__}: a random GPT2LMHeadModel "
        f"(4 layers, width 128, {modules} modules), 16 tokens"
    )


def lines() -> List[Line]:
    return _capture_lines() + _skip_lines()


def _skip_lines() -> List[Line]:
    row = "9. GPT-2 block 1 skipped, returning a stored output"
    return [
        Line(
            row,
            "floor: hand-written `block.forward = lambda *a, **k: stored`, in place",
            "gpt2 skip/hand",
            "gpt2 skip/hand",
        ),
        Line(
            row,
            "**hookbus** pre hook `ctx.skip(stored)` on the attached block",
            "gpt2 skip/hookbus",
            "gpt2 skip/hand",
            "<= 1.1x hand-written",
            lambda r: r.ratio("gpt2 skip/hookbus", "gpt2 skip/hand").median <= 1.1,
        ),
        Line(
            row,
            "floor: hand-written replacement set, one forward, deleted",
            "gpt2 patch/hand",
            "gpt2 patch/hand",
        ),
        Line(
            row,
            "**hookbus** `with patch(model, cache, 'transformer.h.1'):` one forward",
            "gpt2 patch/hookbus",
            "gpt2 patch/hand",
            "<= 1.1x hand-written",
            lambda r: r.ratio("gpt2 patch/hookbus", "gpt2 patch/hand").median <= 1.1,
        ),
    ]


def _capture_lines() -> List[Line]:
    row = "7. GPT-2 capture, every module"
    return [
        Line(
            row,
            "floor: hand-written capture (native forward hooks, `output.detach()` into a "
            "dict) around one forward",
            "gpt2 once/hand",
            "gpt2 once/hand",
        ),
        Line(
            row,
            "**hookbus** `with capture(model):` around one forward",
            "gpt2 once/hookbus",
            "gpt2 once/hand",
            "<= 1.1x hand-written",
            lambda r: r.ratio("gpt2 once/hookbus", "gpt2 once/hand").median <= 1.1,
        ),
        Line(
            row,
            "floor: a forward inside an open hand-written capture",
            "gpt2 open/hand",
            "gpt2 open/hand",
        ),
        Line(
            row,
            "**hookbus** a forward inside an open `capture(model)`",
            "gpt2 open/hookbus",
            "gpt2 open/hand",
            "<= 1.1x hand-written",
            lambda r: r.ratio("gpt2 open/hookbus", "gpt2 open/hand").median <= 1.1,
        ),
        Line(
            row,
            '**hookbus** a forward inside one `capture(model, keep="last")` open for the '
            "whole run (bounded: never restarted)",
            "gpt2 open/hookbus keep last",
            "gpt2 open/hand",
            "<= 1.1x hand-written",
            lambda r: r.ratio("gpt2 open/hookbus keep last", "gpt2 open/hand").median <= 1.1,
        ),
    ]
