"""Where the time of one ``capture()`` around one GPT-2 forward goes, step by step.

The model of row 7 (a tiny random GPT-2, 60 modules). Setting a capture up and
tearing it down is timed apart from the forward, as a cost per module, next to
what a hand-written capture pays to add and remove its native hooks; then the
whole use (set up, one forward, tear down) against the hand-written one.
Interleaved in rounds, like run.py.

    python benchmarks/capture_breakdown.py
"""

from __future__ import annotations

import os
import sys
from typing import Any, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _gpt2_cases
import _harness
import torch
from _harness import Case, absolute, ratio, run_rounds

import hookbus
import hookbus.torch


def _noop(ctx: Any) -> None:
    return None


class Steps:
    """Each step of a capture's set-up and tear-down, on its own."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def hand_hooks(self) -> None:
        capture = _gpt2_cases.HandCapture(self.model)
        capture.__enter__()
        capture.__exit__(None, None, None)

    def attach_detach(self) -> None:
        hookbus.torch.attach(self.model, hookbus.EventBus()).detach()

    def attach_post_detach(self) -> None:
        attachment = hookbus.torch.attach(self.model, hookbus.EventBus())
        attachment.post(attachment.names, _noop)
        attachment.detach()

    def capture_enter_exit(self) -> None:
        capture = hookbus.torch.capture(self.model)
        capture.__enter__()
        capture.__exit__(None, None, None)


def main() -> None:
    _harness.clock = _harness.CLOCKS["cpu"]
    torch.set_num_threads(1)
    model, x = _gpt2_cases.build()
    modules = len(list(model.modules()))
    steps = Steps(model)
    once = _gpt2_cases._Once(hookbus.torch.capture, model, x)
    hand_once = _gpt2_cases._Once(_gpt2_cases.HandCapture, model, x)
    cases: List[Case] = [
        Case("setup/hand-written: add + remove a native hook per module", "f()",
             {"f": steps.hand_hooks}),
        Case("setup/attach + detach, no hooks", "f()", {"f": steps.attach_detach}),
        Case("setup/attach + post hook on every module + detach", "f()",
             {"f": steps.attach_post_detach}),
        Case("setup/capture(): enter + exit", "f()", {"f": steps.capture_enter_exit}),
        Case("once/hand-written capture around one forward", "f()", {"f": hand_once}),
        Case("once/capture() around one forward", "f()", {"f": once}),
    ]  # fmt: skip
    run_rounds(cases, rounds=21, sample_s=0.02)
    print(f"GPT-2 of {modules} modules.")
    print()
    print("| Step | Per module | Ratio to hand-written |")
    print("|---|---:|---:|")
    for case in cases[:4]:
        per_module = absolute(case).median / modules / 1000
        print(f"| {case.key.split('/', 1)[1]} | {per_module:.1f} us | "
              f"{ratio(case, cases[0]).median:.1f}x |")  # fmt: skip
    print()
    print("| Whole use | Median | Ratio to hand-written |")
    print("|---|---:|---:|")
    for case in cases[4:]:
        print(f"| {case.key.split('/', 1)[1]} | {absolute(case).median / 1000:,.0f} us | "
              f"{ratio(case, cases[4]).median:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
