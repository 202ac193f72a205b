"""A second adapter, built only on ``hookbus.adapter``: hook points on an object's methods.

Shows:
* the adapter seam: a hook point is any object of the ``adapter.Point`` shape; the
  bus's registry keeps it by name, tells it when its hooks change
  (``invalidate``, never under the bus lock), and hands it a ``PointPlan``;
* one call of a point: a ``CallContext`` built with ``CallContext.for_call``, each
  phase's hooks run with ``adapter.run_phase``, the context moved from phase to
  phase with ``adapter.rebind``;
* ``ctx.arguments`` by parameter name (the point's ``layout``), ``ctx.skip`` and
  ``ctx.recover``, all working on the adapter's points as on the core's;
* a removable attachment: ``remove()`` puts every method back and forgets the points.

docs/adapters.md walks through this file. Run it: ``python examples/method_hooks.py``
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Dict, List, Optional

import hookbus
from hookbus import adapter


class MethodPoint:
    """The hook point of one bound method, named ``"<prefix>.<method name>"``."""

    kinds = ("pre", "post", "exception")  # the hook kinds that apply to it
    kind = "method"  # what bus.points() says it wraps
    is_async = False  # async hooks are refused on it, at registration
    skip_refusal: Optional[str] = None  # ctx.skip() works: the method is simply not called

    def __init__(self, bus: hookbus.EventBus, name: str, method: Callable[..., Any]) -> None:
        self.bus = bus
        self.name = name
        self.method = method
        self.where = adapter.where_defined(method)
        self.plan: Optional[adapter.PointPlan] = None
        self.stale = True  # no plan asked for yet
        self.calls = itertools.count()

    def invalidate(self) -> None:
        # Called by the registry, with no lock held, whenever hooks that may match
        # this name change. Ask for the plan lazily, at the next call.
        self.stale = True

    def layout(self) -> adapter.Layout:
        # For ctx.arguments: the method's parameters (bound: no self).
        return adapter.layout_of(self.method, self.name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.stale:
            self.stale = False  # before asking: a change meanwhile makes it stale again
            self.plan = self.bus.registry.plan(self)
        plan = self.plan
        if plan is None:  # no hook matches: the plain call
            return self.method(*args, **kwargs)
        target = getattr(self.method, "__self__", None)
        ctx = adapter.CallContext.for_call(
            self.name, target, args, kwargs, next(self.calls), "pre", self
        )
        registry = self.bus.registry
        adapter.run_phase(registry, plan.pre, ctx)
        if ctx.skipped:
            result = ctx.result
        else:
            try:
                result = self.method(*ctx.args, **ctx.kwargs)
            except Exception as error:
                adapter.rebind(ctx, "exception", target, ctx.args, ctx.kwargs, error)
                adapter.run_phase(registry, plan.exception, ctx)
                if not ctx.recovered:
                    raise
                result = ctx.result
        adapter.rebind(ctx, "post", target, ctx.args, ctx.kwargs)
        ctx.result = result
        adapter.run_phase(registry, plan.post, ctx)
        return ctx.result


class MethodHooks(adapter.Removable):
    """Hook points on every public method of ``obj``; ``remove()`` undoes it all."""

    def __init__(self, obj: Any, bus: hookbus.EventBus, prefix: str) -> None:
        self.obj = obj
        self.bus = bus
        names = [n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n))]
        self.points: Dict[str, MethodPoint] = {
            n: MethodPoint(bus, f"{prefix}.{n}", getattr(obj, n)) for n in names
        }
        bus.registry.add_points(list(self.points.values()))  # refused whole, if need be
        for method_name, point in self.points.items():
            setattr(obj, method_name, point)  # the instance's attribute hides the class's

    def remove(self) -> None:
        self.bus.registry.remove_points(list(self.points.values()))
        for method_name in self.points:
            self.obj.__dict__.pop(method_name, None)
        self.points = {}


def hook_methods(obj: Any, bus: hookbus.EventBus, prefix: str) -> MethodHooks:
    """Make every public method of ``obj`` a hook point named ``prefix.<method>``."""
    return MethodHooks(obj, bus, prefix)


# --- using it ------------------------------------------------------------------------


class Account:
    def __init__(self) -> None:
        self.balance = 0

    def deposit(self, amount: int, note: str = "") -> int:
        self.balance += amount
        return self.balance

    def withdraw(self, amount: int) -> int:
        if amount > self.balance:
            raise ValueError("insufficient funds")
        self.balance -= amount
        return self.balance


def main() -> None:
    bus = hookbus.EventBus("bank")
    account = Account()
    log: List[str] = []

    # Hooks first, points later, or the other way round: the registry matches them.
    @bus.pre("account.*")
    def audit(ctx: hookbus.CallContext) -> None:
        log.append(f"{ctx.name} {dict(ctx.arguments)}")

    with hook_methods(account, bus, "account") as hooks:
        assert sorted(p.name for p in bus.points()) == ["account.deposit", "account.withdraw"]

        @bus.pre("account.deposit")
        def cap(ctx: hookbus.CallContext) -> None:
            if ctx.arguments["amount"] > 100:
                ctx.arguments["amount"] = 100  # replace one argument by name

        @bus.exception("account.withdraw")
        def refuse_politely(ctx: hookbus.CallContext) -> None:
            assert isinstance(ctx.exception, ValueError)
            ctx.recover(-1)  # the call returns -1 instead of raising

        assert account.deposit(500, note="salary") == 100
        assert account.withdraw(30) == 70
        assert account.withdraw(1_000) == -1

        skip = bus.pre("account.deposit", lambda ctx: ctx.skip(0), priority=10)
        assert account.deposit(5) == 0  # skipped: the balance is untouched
        skip.remove()
        assert account.balance == 70
        assert hooks.points["deposit"].plan is not None

    # Leaving the block removed the points: the methods are the class's own again.
    assert account.deposit(1) == 71
    assert "deposit" not in vars(account)
    assert log == [
        "account.deposit {'amount': 500, 'note': 'salary'}",
        "account.withdraw {'amount': 30}",
        "account.withdraw {'amount': 1000}",
        "account.deposit {'amount': 5, 'note': ''}",  # pre hooks after a skip still run
    ]
    print("\n".join(log))
    print("example: ok")


if __name__ == "__main__":
    main()
