"""A short tour of hookbus: ``python -m hookbus.demo``.

Each part prints what happened: event hooks, a decorated function with pre, post
and exception hooks, handles and scopes, and (when torch is installed) the torch
adapter.
"""

from __future__ import annotations

import importlib.util
import inspect
import time

import hookbus
from hookbus import CallContext, EventBus


def _title(text: str) -> None:
    print(f"\n== {text}")


def events(bus: EventBus) -> None:
    """Observers of a named event, in priority order, with once and patterns."""
    _title("event hooks: bus.on / bus.emit")

    def mailer(order_id: int, total: str) -> None:
        print(f"  mailer: order {order_id} ({total})")

    def audit(order_id: int, total: str) -> None:
        print(f"  audit (priority HIGH): order {order_id}")

    def any_order_event(*args: object, **kwargs: object) -> None:
        print("  pattern 'order.*' saw it too")

    def first_order_only(order_id: int, total: str) -> None:
        print("  once: first order only")

    bus.on("order.placed", mailer)
    bus.on("order.placed", audit, priority="HIGH")
    bus.on("order.*", any_order_event)
    bus.on("order.placed", first_order_only, once=True)
    print("emit order.placed 1:")
    bus.emit("order.placed", 1, total="9.99 EUR")
    print("emit order.placed 2 (the once-hook is gone):")
    bus.emit("order.placed", 2, total="5.00 EUR")
    bus.on("plugins.formats", lambda: "csv")
    bus.on("plugins.formats", lambda: "json")
    print("collect plugins.formats ->", bus.collect("plugins.formats"))


def hook_points(bus: EventBus) -> None:
    """Pre, post and exception hooks around a decorated function."""
    _title("hook points: @bus.hookable with pre / post / exception hooks")

    @bus.hookable("convert")
    def convert(amount: float, rate: float = 1.0) -> float:
        if amount < 0:
            raise ValueError(f"negative amount {amount}")
        return round(amount * rate, 2)

    def apply_rate(ctx: CallContext) -> None:
        ctx.kwargs = {**ctx.kwargs, "rate": 1.1}
        ctx.data["start"] = time.perf_counter()
        print(f"  pre: call #{ctx.call_index}, args={ctx.args}, rate set to 1.1")

    def report(ctx: CallContext) -> None:
        took_us = (time.perf_counter() - ctx.data["start"]) * 1e6
        print(f"  post: result {ctx.result} (took {took_us:.0f} us); adding a 0.5 fee")
        ctx.result = ctx.result + 0.5

    def recover(ctx: CallContext) -> None:
        print(f"  exception: {type(ctx.exception).__name__}: {ctx.exception}; recovering with 0.0")
        ctx.recover(0.0)

    bus.pre("convert", apply_rate)
    bus.post("convert", report)
    bus.exception("convert", recover)
    print("convert(100) ->", convert(100))
    print("convert(-5) ->", convert(-5))
    print("name and signature kept:", convert.__name__, inspect.signature(convert))


def handles_and_scopes(bus: EventBus) -> None:
    """Handles remove one hook; scopes remove everything registered inside them."""
    _title("handles and scopes")
    handle = bus.on("tick", lambda: print("  tick heard"))
    print("handle:", handle)
    bus.emit("tick")
    handle.remove()
    handle.remove()  # idempotent
    print("after remove (twice), active =", handle.active)
    bus.emit("tick")
    with bus.scope():
        bus.on("tick", lambda: print("  tick heard inside the scope"))
        bus.emit("tick")
    print("after the scope, hooks on 'tick':", bus.hooks("tick"))
    with bus.paused("order.*"):
        bus.emit("order.placed", 3, total="1.00 EUR")
        print("order.placed emitted while paused: no hook ran")
    print("hooks of 'order.placed', in dispatch order:")
    for each in bus.hooks("order.placed"):
        print(f"  {each}")


def main() -> None:
    """Run the tour."""
    print("hookbus", hookbus.__version__, "- a tour")
    bus = EventBus("demo")
    events(bus)
    hook_points(bus)
    handles_and_scopes(bus)
    _title("torch adapter")
    if importlib.util.find_spec("torch") is None:
        print('torch is not installed: pip install "hookbus[torch]" to see this part.')
        return
    from hookbus.torch._demo import tour

    tour()


if __name__ == "__main__":
    main()
