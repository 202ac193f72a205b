"""The rules behind declared events, for every signature: does a hook accept a spec, and do
emit's arguments bind to it.

Each rule is checked against Python's own argument binding over every call shape that
the generated signatures can tell apart (names from a small pool plus one "other").

pluggy's rule holds on a bus: a hook takes any subset of the spec's arguments, by name. A
spec grows an argument and old hooks keep working; the binding is worked out once per
hook, a hook of the spec's own shape pays nothing for it, and emission stays strict.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from inspect import Parameter, Signature
from typing import Any, Dict, List, Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hookbus
from hookbus import EventBus
from hookbus._spec import (
    bad_arguments,
    bind,
    code_shape,
    format_spec,
    hook_mismatch,
    make_binder,
    make_checking_call,
    spec_of,
)

NAMES = ("a", "b", "c", "d")
OTHER = "zz"  # a keyword that no generated signature names

Call = Tuple[int, Tuple[str, ...]]


@st.composite
def signatures(draw: Any) -> Signature:
    """Any valid signature over NAMES: positional-only, positional-or-keyword, *args,
    keyword-only and **kwargs parameters, with or without defaults."""
    names = list(draw(st.permutations(NAMES)))
    counts = draw(st.lists(st.integers(0, 2), min_size=3, max_size=3))
    if sum(counts) > len(NAMES):
        counts = [min(c, 1) for c in counts]
    params: List[Parameter] = []
    default_started = False
    kinds = (Parameter.POSITIONAL_ONLY, Parameter.POSITIONAL_OR_KEYWORD)
    for kind, count in zip(kinds, counts[:2]):
        for _ in range(count):
            default_started = default_started or draw(st.booleans())
            default = None if default_started else Parameter.empty
            params.append(Parameter(names.pop(), kind, default=default))
    if draw(st.booleans()):
        params.append(Parameter("args", Parameter.VAR_POSITIONAL))
    for _ in range(counts[2]):
        default = None if draw(st.booleans()) else Parameter.empty
        params.append(Parameter(names.pop(), Parameter.KEYWORD_ONLY, default=default))
    if draw(st.booleans()):
        params.append(Parameter("kwargs", Parameter.VAR_KEYWORD))
    return Signature(params)


def all_calls() -> List[Call]:
    """Every call shape: 0-5 positionals, and any set of keywords from NAMES and OTHER."""
    keywords = (*NAMES, OTHER)
    subsets = [
        combo
        for size in range(len(keywords) + 1)
        for combo in itertools.combinations(keywords, size)
    ]
    return [(count, combo) for count in range(6) for combo in subsets]


CALLS = all_calls()


def binds(signature: Signature, call: Call, *, prefix: int = 0) -> bool:
    count, keywords = call
    try:
        bind(signature, tuple(range(count + prefix)), dict.fromkeys(keywords))
    except TypeError:
        return False
    return True


def test_bind_binds_as_a_call_does() -> None:
    def hook(d: Any = None, /, **kwargs: Any) -> Any:
        return kwargs

    assert hook(d=1) == {"d": 1}
    bind(inspect.signature(hook), (), {"d": 1})  # Signature.bind raises here before 3.13
    with pytest.raises(TypeError, match="positional only"):
        bind(inspect.signature(lambda d, /: None), (), {"d": 1})


def hook_with(signature: Signature) -> Any:
    def hook(*args: Any, **kwargs: Any) -> None:
        pass  # pragma: no cover - never called, only inspected

    hook.__signature__ = signature  # type: ignore[attr-defined]
    return hook


def failing_call(spec: Signature, hook: Signature, prefix: int) -> Optional[Call]:
    for call in CALLS:
        if binds(spec, call) and not binds(hook, call, prefix=prefix):
            return call
    return None


@settings(max_examples=300, deadline=None)
@given(signatures(), signatures(), st.booleans())
def test_a_hook_is_accepted_exactly_when_every_call_of_the_spec_binds_to_it(
    spec: Signature, hook: Signature, with_name: bool
) -> None:
    """hook_mismatch is None if and only if no call that binds to the spec fails on the hook
    (with_name hooks get one more positional argument first)."""
    mismatch = hook_mismatch(hook_with(hook), "e", spec, with_name=with_name)
    witness = failing_call(spec, hook, prefix=1 if with_name else 0)
    assert (mismatch is None) == (witness is None), (str(spec), str(hook), mismatch, witness)


@settings(max_examples=300, deadline=None)
@given(signatures())
def test_the_emit_binder_raises_exactly_when_arguments_do_not_bind(spec: Signature) -> None:
    binder = make_binder(spec, "e")
    for count, keywords in CALLS:
        kwargs: Dict[str, Any] = dict.fromkeys(keywords)
        try:
            binder(*range(count), **kwargs)
        except TypeError:
            bound = False
        else:
            bound = True
        assert bound == binds(spec, (count, keywords)), (str(spec), count, keywords)
        assert (bad_arguments("e", spec, tuple(range(count)), kwargs) is None) == bound


def _counts_alone(spec: Signature) -> bool:
    """Whether a positional call binds to ``spec`` exactly when it passes one argument per
    parameter: positional parameters without defaults, no *args, no required keyword."""
    return all(
        p.default is Parameter.empty
        if p.kind in (Parameter.POSITIONAL_ONLY, Parameter.POSITIONAL_OR_KEYWORD)
        else p.kind is Parameter.VAR_KEYWORD or p.default is not Parameter.empty
        for p in spec.parameters.values()
        if p.kind is not Parameter.VAR_POSITIONAL
    ) and all(p.kind is not Parameter.VAR_POSITIONAL for p in spec.parameters.values())


@settings(max_examples=300, deadline=None)
@given(signatures())
def test_the_checking_caller_refuses_exactly_the_positional_calls_that_do_not_bind(
    spec: Signature,
) -> None:
    """Made where a count is the whole positional check; then, called by position, it
    raises TypeError before the hook exactly when the arguments don't bind, and passes
    the others on as they came."""
    factory = make_checking_call(spec, "e")
    assert (factory is not None) == _counts_alone(spec), str(spec)
    if factory is None:
        return
    got: List[Tuple[Any, ...]] = []
    caller = factory(lambda *args: got.append(args))
    for count in range(6):
        got.clear()
        try:
            caller(*range(count))
        except TypeError:
            bound = False
        else:
            bound = True
        assert bound == binds(spec, (count, ())), (str(spec), count)
        assert got == ([tuple(range(count))] if bound else [])


@settings(max_examples=100, deadline=None)
@given(signatures(), st.integers(1, 3))
def test_a_declared_emit_refuses_exactly_what_does_not_bind_and_passes_the_rest_as_it_came(
    spec: Signature, hooks: int
) -> None:
    """Hooks that don't check the arguments themselves (the binder first, or the first
    hook's checking caller): every call shape, with keywords or without, is refused
    before any hook runs exactly when it doesn't bind to the spec; else each hook gets
    the arguments as they were emitted."""
    bus = EventBus()
    bus.event("e")(hook_with(spec))
    calls: List[Tuple[int, Tuple[Any, ...], Dict[str, Any]]] = []

    def recorder(index: int) -> Any:
        def hook(*args: Any, **kwargs: Any) -> None:
            calls.append((index, args, kwargs))

        return hook

    for index in range(hooks):
        bus.on("e", recorder(index))
    for count, keywords in CALLS:
        args, kwargs = tuple(range(count)), dict.fromkeys(keywords)
        calls.clear()
        refusal = ""
        try:
            bus.emit("e", *args, **kwargs)
        except TypeError as error:
            refusal = str(error)
        refused = "don't match its spec" in refusal
        assert refused == (refusal != ""), refusal  # no other TypeError
        assert refused != binds(spec, (count, keywords)), (str(spec), count, keywords)
        assert calls == ([] if refused else [(i, args, kwargs) for i in range(hooks)])
    checked = bus.registry.plan_event("e").__class__.__name__ == "CheckedPlan"
    assert checked == _counts_alone(spec)  # both ways of checking were run


def test_a_hook_called_through_the_checking_caller_is_named_when_it_raises() -> None:
    bus = EventBus()

    @bus.event
    def saved(path: str) -> None: ...

    def fails(*args: Any, **kwargs: Any) -> None:
        raise ValueError("disk full")

    bus.on("saved", fails)
    for kwargs in ({}, {"path": "a.txt"}):  # the checking caller, then the binder first
        with pytest.raises(ValueError, match="disk full") as raised:
            bus.emit("saved", *(() if kwargs else ("a.txt",)), **kwargs)
        assert len(raised.value.__notes__) == 1
        assert "fails" in raised.value.__notes__[0]
        assert "removed while" not in raised.value.__notes__[0]


@settings(max_examples=100, deadline=None)
@given(signatures())
def test_the_binder_has_the_specs_signature(spec: Signature) -> None:
    shown = inspect.signature(make_binder(spec, "e"))
    assert [(p.name, p.kind, p.default is Parameter.empty) for p in shown.parameters.values()] == [
        (p.name, p.kind, p.default is Parameter.empty) for p in spec.parameters.values()
    ]


@settings(max_examples=300, deadline=None)
@given(signatures(), signatures())
def test_functions_of_equal_code_shape_accept_exactly_the_same_calls(
    one: Signature, other: Signature
) -> None:
    """The emit fast path lets a first hook of the spec's code shape check the arguments."""
    first, second = make_binder(one, "a"), make_binder(other, "b")
    if code_shape(first) != code_shape(second):  # type: ignore[arg-type]
        return
    for call in CALLS:
        assert binds(one, call) == binds(other, call), (str(one), str(other), call)


def test_code_shape_reads_the_code_not_wrapped_or_signature() -> None:
    import functools

    def inner(x: int) -> None: ...

    @functools.wraps(inner)
    def wrapper(*args: Any, **kwargs: Any) -> None: ...

    assert str(inspect.signature(wrapper)) == str(inspect.signature(inner))
    assert code_shape(wrapper) != code_shape(inner)  # type: ignore[arg-type]


def test_the_mismatch_names_a_failing_call_and_the_reason() -> None:
    def spec(user: str, *, admin: bool = False) -> None: ...

    signature = inspect.signature(spec)
    assert hook_mismatch(lambda user, admin=False: None, "e", signature) is None
    assert hook_mismatch(lambda *args, **kwargs: None, "e", signature) is None
    assert hook_mismatch(lambda user, **kwargs: None, "e", signature) is None
    assert hook_mismatch(lambda user: None, "e", signature) == (
        "called as hook(user, admin=...) it fails: got an unexpected keyword argument 'admin'"
    )
    assert hook_mismatch(lambda user, extra: None, "e", signature) == (
        "called as hook(user) it fails: missing a required argument: 'extra'"
    )
    assert hook_mismatch(lambda: None, "e", signature) == (
        "called as hook(user) it fails: too many positional arguments"
    )
    # A name passed as a keyword must be the hook's name for it.
    assert hook_mismatch(lambda person, admin=False: None, "e", signature) == (
        "called as hook(user=...) it fails: missing a required argument: 'person' (the spec "
        "lets callers pass 'user' by name; if they never do, make it positional-only in the "
        "stub: 'user, /')"
    )


def test_a_hook_whose_signature_python_cannot_tell_is_accepted() -> None:
    class Opaque:
        __signature__ = property(lambda self: (_ for _ in ()).throw(ValueError("no")))

        def __call__(self, *args: Any) -> None: ...

    assert hook_mismatch(Opaque(), "e", inspect.signature(lambda x: None)) is None


def test_bad_arguments_names_the_event_the_spec_and_what_was_passed() -> None:
    def spec(user: str, *, admin: bool = False) -> None: ...

    error = bad_arguments("user.created", inspect.signature(spec), ("ada", 1), {})
    assert error is not None
    assert str(error) == (
        "event 'user.created' was emitted with arguments that don't match its spec "
        "user.created(user: str, *, admin: bool = False): got (str, int), "
        "too many positional arguments; no hook was called"
    )


def test_format_spec_drops_the_return_annotation_and_quotes() -> None:
    def spec(x: int, *rest: str, flag: bool = True, **extra: Any) -> None: ...

    assert format_spec("e", inspect.signature(spec)) == (
        "e(x: int, *rest: str, flag: bool = True, **extra: Any)"
    )


@pytest.mark.parametrize(
    ("stub", "message"),
    [
        (print, "needs a function as its stub, got builtin_function_or_method"),
        ("user.created", "needs a function as its stub, got str"),
        (len, "needs a function as its stub"),
    ],
)
def test_a_stub_that_is_not_a_function_is_refused(stub: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        spec_of(stub, "event()")


def test_an_async_stub_is_refused_saying_hooks_may_still_be_async() -> None:
    async def signup(user: str) -> None: ...

    with pytest.raises(TypeError, match=r"is 'async def'.*hooks may still be async"):
        spec_of(signup, "event()")


# --- a hook takes any subset of the spec's arguments, by name -----------------------------


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
