"""pluggy's rule on declared events: a hook takes any subset of the spec's arguments, by name.

A spec grows an argument and old hooks keep working; the binding is worked out once per
hook, a hook of the spec's own shape pays nothing for it, and emission stays strict.
Also pluggy's ``optionalhook`` and the results of a historic replay.
"""

from __future__ import annotations

import functools
from typing import Any, List, Tuple

import pytest

import hookbus
from hookbus import EventBus, UnknownNameError


def declare_order_paid(bus: EventBus) -> hookbus.Event[Any]:
    @bus.event("order.paid")
    def order_paid(order: str, amount: int, *, currency: str = "EUR") -> None: ...

    return order_paid


def test_a_hook_taking_a_subset_of_the_spec_by_name_gets_just_those() -> None:
    bus = EventBus()
    event = declare_order_paid(bus)
    seen: List[Tuple[str, Any]] = []
    bus.on("order.paid", lambda amount: seen.append(("amount", amount)))
    bus.on("order.paid", lambda currency, order: seen.append(("both", (currency, order))))
    bus.on("order.paid", lambda: seen.append(("none", None)))
    event.emit("o-1", 30, currency="USD")
    bus.emit("order.paid", "o-2", amount=5)  # the spec's default is passed when left out
    assert seen == [
        ("amount", 30),
        ("both", ("USD", "o-1")),
        ("none", None),
        ("amount", 5),
        ("both", ("EUR", "o-2")),
        ("none", None),
    ]
    assert bus.collect("order.paid", "o-3", 1) == [None, None, None]


def test_a_hook_registered_before_the_declaration_may_take_a_subset() -> None:
    bus = EventBus()
    seen: List[Any] = []
    bus.on("order.paid", lambda amount: seen.append(amount))
    bus.on("order.*", lambda order: seen.append(order))  # a pattern: by name too
    declare_order_paid(bus)
    bus.emit("order.paid", "o-1", 7)
    assert seen == [7, "o-1"]


def test_names_are_matched_by_name_not_by_position() -> None:
    bus = EventBus()
    declare_order_paid(bus)
    got: List[Any] = []
    bus.on("order.paid", lambda amount, order: got.append((amount, order)))
    bus.emit("order.paid", "o-1", 3)
    assert got == [(3, "o-1")]


def test_subset_hooks_work_in_every_dispatch_and_with_every_option() -> None:
    bus = EventBus(errors="collect")
    declare_order_paid(bus)

    class Shop:
        def paid(self, amount: int) -> int:
            return amount * 2

    shop = Shop()
    bus.on("order.paid", shop.paid, weak=True)
    bus.on("order.paid", lambda event, currency: currency, with_name=True)
    bus.on("order.paid", lambda order: order, once=True, priority=-1)
    assert bus.collect("order.paid", "o-1", 4) == [8, "EUR", "o-1"]
    assert bus.first("order.paid", "o-1", 4) == 8
    assert bus.collect("order.paid", "o-1", 4) == [8, "EUR"]


def test_a_hook_needing_an_argument_the_spec_does_not_give_is_refused_naming_it() -> None:
    bus = EventBus()
    declare_order_paid(bus)
    with pytest.raises(TypeError, match="'customer'"):
        bus.on("order.paid", lambda amount, customer: None)
    with pytest.raises(TypeError, match="'customer'"):
        bus.on("order.paid", lambda *, customer: None)
    bus.on("order.paid", lambda amount, customer=None: None)  # a default: not needed
    assert len(bus.hooks("order.paid")) == 1


def test_emission_stays_strict() -> None:
    bus = EventBus()
    declare_order_paid(bus)
    called: List[Any] = []
    bus.on("order.paid", lambda amount: called.append(amount))
    with pytest.raises(TypeError, match="don't match its spec"):
        bus.emit("order.paid", "o-1")  # amount missing: pluggy only warns
    with pytest.raises(TypeError, match="don't match its spec"):
        bus.emit("order.paid", "o-1", 1, tip=2)
    assert called == []


def test_a_hook_of_the_specs_shape_runs_as_it_is() -> None:
    bus = EventBus()

    @bus.event
    def saved(path: str) -> None: ...

    def hook(path: str) -> None: ...

    bus.on("saved", hook)
    bus.emit("saved", "a.txt")
    assert bus.registry.event_plans["saved"] == (hook,)  # nothing in between


def test_a_subset_hook_costs_one_call_in_the_fast_plan() -> None:
    bus = EventBus()
    declare_order_paid(bus)

    def hook(amount: int) -> None: ...

    bus.on("order.paid", hook)
    bus.emit("order.paid", "o-1", 1)
    (caller,) = bus.registry.event_plans["order.paid"]
    assert caller is not hook
    assert caller.__wrapped__ is hook


def test_the_historic_replay_also_binds_by_name() -> None:
    bus = EventBus()

    @bus.event(historic=True)
    def configured(config: str, verbose: bool = False) -> None: ...

    configured.emit("a.toml", verbose=True)
    seen: List[Any] = []
    configured.on(lambda verbose: seen.append(verbose))
    assert seen == [True]


def test_a_partial_subset_hook_is_bound_by_name() -> None:
    bus = EventBus()
    declare_order_paid(bus)
    seen: List[Any] = []

    def record(tag: str, amount: int) -> None:
        seen.append((tag, amount))

    bus.on("order.paid", functools.partial(record, "paid"))
    bus.emit("order.paid", "o-1", 9)
    assert seen == [("paid", 9)]


# --- pluggy's optionalhook ---------------------------------------------------------------


def test_an_optional_hook_is_not_reported_by_check_pending() -> None:
    bus = EventBus()
    handle = bus.on("maybe.someday", print, optional=True)
    bus.check_pending()
    assert handle.optional
    bus.on("typo.here", print)
    with pytest.raises(UnknownNameError) as raised:
        bus.check_pending()
    assert [h.name for h in raised.value.handles] == ["typo.here"]


def test_an_optional_hook_is_accepted_by_a_strict_bus_and_checked_once_declared() -> None:
    bus = EventBus(strict=True)
    bus.on("plugin.loaded", lambda name: None, optional=True)
    with pytest.raises(TypeError, match="does not accept"):

        @bus.event("plugin.loaded")
        def loaded(path: str) -> None: ...


def test_listens_takes_optional() -> None:
    class Plugin:
        @hookbus.listens("other_plugin.ready", optional=True)
        def ready(self) -> None: ...

    bus = EventBus(strict=True)
    (handle,) = bus.subscribe(Plugin())
    assert handle.optional
    bus.check_pending()


# --- results of a historic replay (pluggy's call_historic(result_callback=...)) ----------


def test_a_historic_emission_gives_every_result_to_its_callback_late_hooks_included() -> None:
    bus = EventBus()

    @bus.event(historic=True)
    def register_formats(registry: str) -> None: ...

    bus.on("register_formats", lambda registry: f"csv for {registry}")
    results: List[Any] = []
    register_formats.emit_with_results(results.append, "main")
    assert results == ["csv for main"]
    bus.on("register_formats", lambda registry: f"json for {registry}")
    bus.on("register_formats", lambda registry: None)  # None is no result, as in pluggy
    assert results == ["csv for main", "json for main"]


def test_a_refused_declaration_leaves_no_by_name_binding_behind() -> None:
    bus = EventBus()
    seen: List[Any] = []
    bus.on("order.paid", lambda amount: seen.append(amount))  # fits the spec, by name
    bus.on("order.paid", lambda customer: None)  # needs customer: the declaration fails
    with pytest.raises(TypeError, match="'customer'"):
        declare_order_paid(bus)
    bus.emit("order.paid", 5)  # undeclared: called with what is emitted, as before
    bus.collect("order.paid", 6)  # the full loop too
    assert seen == [5, 6]
