"""Checked by tests/test_typing.py with mypy and pyright, never imported by pytest.

Typed hook points: ``@bus.hookable`` on ``def f(x: int) -> str`` gives a point whose hooks
(``f.pre``, ``f.post``, ``f.exception``) take a ``CallContext[str]`` and return None.
Each line whose comment says error must be reported, and no other line.
"""

from typing import Any, AsyncIterator, Iterator

import hookbus
from hookbus import CallContext

bus = hookbus.EventBus()


@bus.hookable("label")
def label(x: int) -> str:
    return str(x)


class Model:
    @bus.hookable("forward")
    def forward(self, x: int) -> str:
        return str(x)

    @bus.hookable("make")
    @classmethod
    def make(cls, size: int) -> "Model":
        return cls()

    @classmethod
    @bus.hookable("build")
    def build(cls, size: int) -> "Model":
        return cls()


@bus.hookable
async def fetch(url: str) -> bytes:
    return b""


@hookbus.hookable("scale")
def scale(x: int) -> float:
    return x * 2.0


sized = bus.wrap(len, "len")

# --- what works ------------------------------------------------------------------------


@label.post
def shout(ctx: CallContext[str]) -> None:
    length: int = len(ctx.result)  # ctx.result is a str
    ctx.result = ctx.result.upper() * length


@label.pre(priority="HIGH", once=True)
def cached(ctx: CallContext[str]) -> None:
    ctx.skip("cached")


@label.exception
def fallback(ctx: CallContext[str]) -> None:
    ctx.recover("fallback")


@label.post
def untyped(ctx: CallContext) -> None: ...  # a bare CallContext is CallContext[Any]


def counts(ctx: CallContext[int]) -> None: ...
def on_page(ctx: CallContext[bytes]) -> None: ...
async def on_page_async(ctx: CallContext[bytes]) -> None: ...


text: str = label(1)
shout(CallContext("label", None, (1,), {}))  # the decorated hook is still the function
label.post(lambda ctx: None)
label.pre(lambda ctx: ctx.skip())
label.post(shout, priority=3, target=None, weak=False)
Model.forward.post(shout, target=Model())
Model.forward.pre(lambda ctx: None)
out: str = Model().forward(3)
made: Model = Model.make(3)
built: Model = Model.build(3)
Model.make.post(lambda ctx: None)
scale.post(lambda ctx: None)
size: int = sized("abc")
sized.post(counts)
fetch.post(on_page)
fetch.post(on_page_async)
fetch.exception(lambda ctx: ctx.recover(b"offline"))
point: hookbus.HookPoint = label.__hookbus_point__


async def main() -> bytes:
    page: bytes = await fetch("https://example.org")
    return page


# --- what type checkers refuse -----------------------------------------------------------


@label.post  # error: a hook takes the context
def no_context() -> None: ...


@label.post  # error: and returns None
def returns(ctx: CallContext[str]) -> str:
    return ctx.result


@label.post  # error: ctx.result is a str at this point
def wrong_result(ctx: CallContext[int]) -> None: ...


def sets_int(ctx: CallContext[str]) -> None:
    ctx.result = 0  # error: a str must replace a str


async def returns_async(ctx: CallContext[bytes]) -> int:
    return 1


label.post(lambda ctx: ctx.result)  # error: a lambda that returns a value
label.exception(lambda ctx: ctx.recover(0))  # error: recover takes a str here
label.pre(lambda ctx: ctx.skip(b""))  # error: and so does skip
label.post(shout, priorty=1)  # error: a misspelt option
label.pre(counts)  # error: a hook of another point's type
sized.post(shout)  # error: len's result is an int
fetch.post(returns_async)  # error: an async hook returns None too
fetch.post(counts)  # error: fetch's result is bytes
Model().forward.post(shout)  # error: hooks of a method are registered through its class
label("one")  # error: the call itself is checked, as before
later: Any = fetch(1)  # error: and an async point's too


@label.around
def span(ctx: CallContext[str]) -> Iterator[None]:
    yield
    ctx.result = ctx.result.upper()


@fetch.around
async def timed(ctx: CallContext[bytes]) -> AsyncIterator[None]:
    yield


@label.around  # error: an around hook is a generator of the context
def not_a_generator(ctx: CallContext[str]) -> None:
    return None


@label.around
def replaces_with_int(ctx: CallContext[str]) -> Iterator[None]:
    yield
    ctx.result = 1  # error: a str must replace a str
