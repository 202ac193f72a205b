"""Checked by tests/test_typing.py with mypy and pyright, never imported by pytest.

The torch adapter's registering methods, as torch.md writes them: an around hook is a
generator of ``ctx``, on an attachment and on ``every_module`` alike. Each line whose
comment says error must be reported, and no other line.
"""

from typing import Iterator

from torch import nn

import hookbus
import hookbus.torch
from hookbus import CallContext

model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
bus = hookbus.EventBus()
net = hookbus.torch.attach(model, bus)


def timed(ctx: CallContext) -> Iterator[None]:
    yield


def not_a_generator(ctx: CallContext) -> None:
    pass


def observe(ctx: CallContext) -> None:
    pass


one: hookbus.Handle = net.around("0", timed)
group: hookbus.HandleGroup = net.around(nn.Linear, timed)
net.around("0", not_a_generator)  # error: an around hook yields
net.post("0", observe)
net.post("0", timed)  # error: a post hook returns None

every = hookbus.torch.every_module(bus)
every.around(timed)
every.around(not_a_generator)  # error: an around hook yields
