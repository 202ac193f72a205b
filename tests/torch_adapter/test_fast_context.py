"""The module post dispatcher builds its context inline, for speed: the same as the class's."""

from __future__ import annotations

from typing import Any, Dict, List

import torch
from torch import nn

import hookbus
import hookbus.torch
from hookbus import CallContext


def _fields(ctx: CallContext) -> Dict[str, Any]:
    return {slot: getattr(ctx, slot) for slot in CallContext.__slots__}


def test_post_fast_path_context_matches_call_context_init() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(nn.Identity())
    hookbus.torch.attach(model, bus)
    seen: List[CallContext] = []
    bus.post("0", seen.append)  # plain post hooks alone: the inline fast path
    x = torch.ones(2)
    model(x, **{})
    (fast,) = seen
    slow = CallContext("0", model[0], fast.args, fast.kwargs, fast.call_index, "post", fast._point)
    slow.result = fast.result
    assert _fields(fast) == _fields(slow)
    assert fast._point is not None
    assert fast.name == "0"
    assert fast.result is x
