"""Hooks around calls: pre, post and exception hooks on a function and on a method.

Shows:
* ``@bus.hookable`` on a function and on a method; hooks get a ``CallContext``;
* a pre hook that rewrites the arguments (``ctx.args``), and one that refuses a
  call by raising; for a method, ``ctx.target`` is the instance;
* a post hook that replaces the result (``ctx.result``), and one that times the
  call, sharing its start time with a pre hook through ``ctx.data``;
* exception hooks that retry a flaky call, and that recover with a fallback
  value (``ctx.recover``); errors no hook handles still propagate.

Run it: ``python examples/pre_post_exception.py``
"""

from __future__ import annotations

import time
from typing import Dict, List

import hookbus

bus = hookbus.EventBus("shop")

PRICES = {"apple": 0.5, "pear": 0.75}
flaky_failures = {"pear": 2}  # the price service fails twice for pears, then answers


@bus.hookable("price")
def price(item: str) -> float:
    """Ask a (pretend) remote service for a price."""
    if flaky_failures.get(item, 0) > 0:
        flaky_failures[item] -= 1
        raise ConnectionError(f"price service timed out for {item!r}")
    return PRICES[item]


class Cart:
    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.items: Dict[str, int] = {}

    @bus.hookable("cart.add")
    def add(self, item: str, quantity: int = 1) -> int:
        self.items[item] = self.items.get(item, 0) + quantity
        return self.items[item]


# --- hooks on the function ------------------------------------------------------------


@bus.pre("price")
def normalise(ctx: hookbus.CallContext) -> None:
    (item,) = ctx.args
    ctx.args = (item.strip().lower(),)


@bus.post("price")
def member_discount(ctx: hookbus.CallContext) -> None:
    ctx.result = round(ctx.result * 0.9, 4)


@bus.exception("price", priority="HIGH")
def retry(ctx: hookbus.CallContext) -> None:
    """Retry a timed-out call up to 3 times, calling the undecorated function."""
    if not isinstance(ctx.exception, ConnectionError):
        return  # not ours: let the next exception hook, or the caller, see it
    for _attempt in range(3):
        try:
            ctx.recover(ctx.target(*ctx.args, **ctx.kwargs))  # target: the plain function
            return
        except ConnectionError:
            continue


@bus.exception("price")
def unknown_item(ctx: hookbus.CallContext) -> None:
    if isinstance(ctx.exception, KeyError):
        ctx.recover(float("nan"))  # the post hooks then run on the recovered value


# --- hooks on the method ----------------------------------------------------------------

timings: List[float] = []


@bus.pre("cart.add")
def check_quantity(ctx: hookbus.CallContext) -> None:
    quantity = ctx.kwargs.get("quantity", ctx.args[2] if len(ctx.args) > 2 else 1)
    if quantity <= 0:
        raise ValueError(f"{ctx.target.owner}'s cart: quantity must be positive, got {quantity}")
    ctx.data["start"] = time.perf_counter()


@bus.post("cart.add")
def time_it(ctx: hookbus.CallContext) -> None:
    timings.append(time.perf_counter() - ctx.data["start"])


def main() -> None:
    # Arguments rewritten, result replaced.
    assert price("  APPLE ") == 0.45
    # Two timeouts, retried by the exception hook; the caller never sees them.
    assert price("pear") == 0.675
    # Recovered by the second exception hook; the discount still applied (to nan).
    assert price("durian") != price("durian")  # nan

    cart = Cart("ada")
    assert cart.add("apple") == 1
    assert cart.add("apple", quantity=2) == 3
    refused = ""
    try:
        cart.add("pear", quantity=0)
    except ValueError as error:
        refused = str(error)
    assert "ada's cart" in refused, "the pre hook should have refused quantity=0"
    assert cart.items == {"apple": 3}
    assert len(timings) == 2  # the refused call never ran, so it was not timed
    assert all(seconds >= 0 for seconds in timings)

    # Remove the retry hook: a timeout now reaches the caller.
    for handle in bus.handles_of(retry):
        handle.remove()
    flaky_failures["pear"] = 1
    try:
        price("pear")
    except ConnectionError as error:
        print("no retry any more:", error)
    else:
        raise AssertionError("the timeout should have propagated")

    print(f"cart.add took {timings[0] * 1e6:.0f} us and {timings[1] * 1e6:.0f} us")
    print("pre/post/exception example: ok")


if __name__ == "__main__":
    main()
