"""Exception hooks on modules: one rule for every hook on the module, hookbus's or not.

The docs say exception hooks run when the forward, a pre hook or a post hook raises.
A module may also carry plain torch hooks (a library's, a user's); their errors are
errors of the same call, and hookbus's hooks must see them the same way.
"""

from __future__ import annotations

from typing import Any, List

import pytest
import torch
from torch import nn

import hookbus
import hookbus.torch

pytestmark = pytest.mark.torch


def _raise(*args: Any) -> None:
    raise ValueError("a plain torch hook failed")


@pytest.mark.xfail(
    strict=True,
    reason="when a plain torch forward hook registered before hookbus's raises, hookbus's "
    "post hooks run as if the call succeeded and no exception hook fires",
)
def test_a_plain_torch_forward_hook_s_error_reaches_exception_hooks_not_post_hooks() -> None:
    """As for a failing hookbus post hook: the exception hooks see the error, and the post
    hooks after it do not run on an output the call never returned."""
    model = nn.Sequential(nn.Linear(2, 2))
    model[0].register_forward_hook(_raise)  # before hookbus's dispatcher
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[Any] = []
    net.post("0", lambda ctx: log.append("post"))
    net.exception("0", lambda ctx: log.append(("exception", type(ctx.exception).__name__)))
    with pytest.raises(ValueError, match="plain torch hook"):
        model(torch.ones(1, 2))
    assert log == [("exception", "ValueError")]
    net.detach()


def test_a_plain_torch_pre_hook_s_error_reaches_exception_hooks() -> None:
    """The twin that holds today: a plain torch pre hook's error fires exception hooks."""
    model = nn.Sequential(nn.Linear(2, 2))
    model[0].register_forward_pre_hook(_raise)
    net = hookbus.torch.attach(model, hookbus.EventBus())
    log: List[Any] = []
    net.post("0", lambda ctx: log.append("post"))
    net.exception("0", lambda ctx: log.append(("exception", type(ctx.exception).__name__)))
    with pytest.raises(ValueError, match="plain torch hook"):
        model(torch.ones(1, 2))
    assert log == [("exception", "ValueError")]
    net.detach()
