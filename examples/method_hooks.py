"""A second adapter, on ``hookbus.adapter`` alone: hooks on methods.

Shows:
* the adapter seam: a hook point is any object of the ``adapter.Point``
  shape; the bus's registry keeps it by name, tells it when its hooks
  change (``invalidate``, never under the bus lock), and hands it a
  ``PointPlan``;
* one call of a point: a ``CallContext`` built with
  ``CallContext.for_call``, each phase's hooks run with
  ``adapter.run_phase``, the context moved from phase to phase with
  ``adapter.rebind``;
* ``ctx.arguments`` by parameter name (the point's ``layout``),
  ``ctx.skip`` and ``ctx.recover``, working on these points as on the
  core's;
* a removable attachment: ``remove()`` puts every method back and forgets
  the points.

docs/adapters.md walks through this file.
Run it: ``python examples/method_hooks.py``
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Dict, List, Optional

import hookbus
from hookbus import adapter

Method = Callable[..., Any]


class MethodPoint:
    """The hook point of one bound method, named ``"<prefix>.<name>"``."""

    kinds = ("pre", "post", "exception")  # the hook kinds that apply
    kind = "method"  # what bus.points() says it wraps
    is_async = False  # async hooks are refused on it, at registration
    # ctx.skip() works here: the method is simply not called.
    skip_refusal: Optional[str] = None

    def __init__(self, bus: hookbus.EventBus, name: str, method: Method):
        self.bus = bus
        self.name = name
        self.method = method
        self.where = adapter.where_defined(method)
        self.plan: Optional[adapter.PointPlan] = None
        self.stale = True  # no plan asked for yet
        self.calls = itertools.count()

    def invalidate(self) -> None:
        # Called by the registry, with no lock held, whenever hooks that
        # may match this name change. Ask for the plan at the next call.
        self.stale = True

    def layout(self) -> adapter.Layout:
        # For ctx.arguments: the method's parameters (bound: no self).
        return adapter.layout_of(self.method, self.name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.stale:
            # Before asking: a change meanwhile makes it stale again.
            self.stale = False
            self.plan = self.bus.registry.plan(self)
        plan = self.plan
        if plan is None:  # no hook matches: the plain call
            return self.method(*args, **kwargs)
        target = getattr(self.method, "__self__", None)
        ctx = adapter.CallContext.for_call(
            self.name,
            target,
            args,
            kwargs,
            call_index=next(self.calls),
            phase="pre",
            point=self,
        )
        registry = self.bus.registry
        adapter.run_phase(registry, plan.pre, ctx)
        if ctx.skipped:
            result = ctx.result
        else:
            try:
                result = self.method(*ctx.args, **ctx.kwargs)
            except Exception as error:
                args, kwargs = ctx.args, ctx.kwargs
                adapter.rebind(ctx, "exception", target, args, kwargs, error)
                adapter.run_phase(registry, plan.exception, ctx)
                if not ctx.recovered:
                    # Let go of the error: raised through this frame
                    # (which holds ctx), it would make a reference cycle.
                    adapter.rebind(ctx, "post", target, args, kwargs)
                    raise
                result = ctx.result
        adapter.rebind(ctx, "post", target, ctx.args, ctx.kwargs)
        ctx.result = result
        adapter.run_phase(registry, plan.post, ctx)
        return ctx.result


class MethodHooks(adapter.Removable):
    """Hook points on each public method of ``obj``; ``remove()`` undoes it."""

    def __init__(self, obj: Any, bus: hookbus.EventBus, prefix: str) -> None:
        self.obj = obj
        self.bus = bus
        self.points: Dict[str, MethodPoint] = {}
        for name in dir(obj):
            method = getattr(obj, name)
            if not name.startswith("_") and callable(method):
                point = MethodPoint(bus, f"{prefix}.{name}", method)
                self.points[name] = point
        # All or nothing: refused whole if an async hook would match.
        bus.registry.add_points(list(self.points.values()))
        for name, point in self.points.items():
            setattr(obj, name, point)  # hides the class's method

    def remove(self) -> None:
        self.bus.registry.remove_points(list(self.points.values()))
        for name in self.points:
            self.obj.__dict__.pop(name, None)
        self.points = {}


def hook_methods(obj: Any, bus: hookbus.EventBus, prefix: str) -> MethodHooks:
    """Make every public method of ``obj`` a point named ``prefix.<name>``."""
    return MethodHooks(obj, bus, prefix)


# --- using it ---------------------------------------------------------------


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

    # Hooks first, points later, or the other way round: all the same.
    @bus.pre("account.*")
    def audit(ctx: hookbus.CallContext) -> None:
        log.append(f"{ctx.name} {dict(ctx.arguments)}")

    with hook_methods(account, bus, "account") as hooks:
        names = sorted(point.name for point in bus.points())
        assert names == ["account.deposit", "account.withdraw"]

        @bus.pre("account.deposit")
        def cap(ctx: hookbus.CallContext) -> None:
            if ctx.arguments["amount"] > 100:
                ctx.arguments["amount"] = 100  # replace one argument

        @bus.exception("account.withdraw")
        def refuse_politely(ctx: hookbus.CallContext) -> None:
            assert isinstance(ctx.exception, ValueError)
            ctx.recover(-1)  # the call returns -1 instead of raising

        assert account.deposit(500, note="salary") == 100
        assert account.withdraw(30) == 70
        assert account.withdraw(1_000) == -1

        def skip(ctx: hookbus.CallContext) -> None:
            ctx.skip(0)

        handle = bus.pre("account.deposit", skip, priority=10)
        assert account.deposit(5) == 0  # skipped: the balance is untouched
        handle.remove()
        assert account.balance == 70
        assert hooks.points["deposit"].plan is not None

    # Leaving the block removed the points: the class's methods again.
    assert account.deposit(1) == 71
    assert "deposit" not in vars(account)
    assert log == [
        "account.deposit {'amount': 500, 'note': 'salary'}",
        "account.withdraw {'amount': 30}",
        "account.withdraw {'amount': 1000}",
        # The pre hooks after a skip still run.
        "account.deposit {'amount': 5, 'note': ''}",
    ]
    print("\n".join(log))
    print("example: ok")


if __name__ == "__main__":
    main()
