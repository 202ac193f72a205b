"""Declared events: specs checked at registration and at emission, first results, historic
events, hooks that match nothing, and the module-level API on the default bus."""

from __future__ import annotations

import asyncio
import functools
import gc
import inspect
import threading
import types
import warnings
import weakref
from typing import Any, Callable, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hookbus
from hookbus import Event, EventBus, UnknownNameError

HERE = __file__


def line_of(fn: Callable[..., Any]) -> str:
    return f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"


def declare_user_created(bus: EventBus, name: str = "user.created") -> Event[Any]:
    @bus.event(name)
    def user_created(user: str, *, admin: bool = False) -> None:
        """Emitted after a user row is committed."""

    return user_created


# --- declaring ----------------------------------------------------------------------------


def test_the_stub_gives_the_name_the_spec_and_the_docs() -> None:
    bus = EventBus()

    @bus.event
    def user_created(user: str, *, admin: bool = False) -> None:
        """Emitted after a user row is committed."""

    assert isinstance(user_created, Event)
    assert user_created.name == "user_created"
    assert user_created.bus is bus
    assert str(user_created.signature) == "(user: 'str', *, admin: 'bool' = False) -> 'None'"
    assert user_created.__doc__ == "Emitted after a user row is committed."
    assert repr(user_created) == "<Event user_created(user: str, *, admin: bool = False)>"
    assert bus.event("user.created")(lambda user: None).name == "user.created"


def test_the_module_level_event_declares_on_the_default_bus(default_bus: EventBus) -> None:
    @hookbus.event("test.module.level")
    def ping(n: int, /) -> None: ...

    assert ping.bus is hookbus.default_bus
    seen: List[int] = []
    hookbus.on("test.module.level", seen.append)
    hookbus.emit("test.module.level", 1)
    ping.emit(2)
    assert seen == [1, 2]


def test_every_event_method_goes_through_the_bus() -> None:
    bus = EventBus()
    ev = declare_user_created(bus)
    seen: List[Any] = []
    hook = ev.on(lambda user, admin=False: seen.append((user, admin)) or user.upper())
    (handle,) = bus.handles_of(hook)
    ev.emit("ada", admin=True)
    assert ev.collect("bob") == ["BOB"]
    assert ev.first("cy") == "CY"
    assert asyncio.run(ev.collect_async("di")) == ["DI"]
    asyncio.run(ev.emit_async("ed", admin=True))
    assert seen == [("ada", True), ("bob", False), ("cy", False), ("di", False), ("ed", True)]
    assert ev.hooks() == [handle] == bus.hooks("user.created")


def test_on_takes_every_option_and_works_as_a_decorator() -> None:
    bus = EventBus()
    ev = declare_user_created(bus)
    seen: List[Any] = []

    @ev.on(priority=5, once=True)
    def first(user: str, *, admin: bool = False) -> None:
        seen.append(("first", user))

    ev.on(lambda event, user, admin=False: seen.append((event, user)), with_name=True)
    sender = "ada"
    ev.on(lambda user, **kwargs: seen.append(("target", user)), target=sender)
    ev.emit(sender)
    ev.emit("bob")
    assert seen == [
        ("first", "ada"),
        ("user.created", "ada"),
        ("target", "ada"),
        ("user.created", "bob"),
    ]
    assert [h.priority for h in bus.handles_of(first)] == []  # once: removed after its call


@pytest.mark.parametrize(
    ("stub", "message"),
    [
        (print, "needs a function as its stub, got builtin_function_or_method"),
        (42, "needs a function as its stub, got int"),
        (functools.partial(print), "got partial"),
    ],
)
def test_a_stub_that_is_not_a_function_is_refused(stub: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        EventBus().event(stub)


def test_a_bad_event_name_or_option_is_refused_where_it_is_written() -> None:
    bus = EventBus()
    assert bus.event("user.*")(lambda: None).name == "user.*"  # any string is a name
    with pytest.raises(TypeError, match="needs a function as its stub, got int"):
        bus.event(3)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="historic= takes True or False"):
        bus.event("x", historic="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name it explicitly"):
        bus.event(lambda x: None)
    assert bus.hooks() == []


def test_a_positional_parameter_that_a_hook_takes_by_position_only_gets_a_hint() -> None:
    bus = EventBus()

    @bus.event
    def ping(n: int) -> None: ...

    seen: List[int] = []
    with pytest.raises(TypeError, match=r"make it positional-only in the stub: 'n, /'"):
        ping.on(seen.append)  # list.append(object, /): emit(n=1) would fail


def test_a_stub_with_only_star_args_is_a_spec_like_any_other() -> None:
    bus = EventBus()

    @bus.event
    def values(*numbers: int) -> None: ...

    seen: List[Any] = []
    values.on(lambda *numbers: seen.append(numbers))
    values.emit(1, 2, 3)
    assert seen == [(1, 2, 3)]
    with pytest.raises(TypeError, match="does not accept"):
        values.on(lambda a, b: None)


# --- checking hooks at registration --------------------------------------------------------


def test_a_hook_that_does_not_accept_the_spec_is_refused_naming_it_the_event_and_the_spec() -> (
    None
):
    bus = EventBus()
    declare_user_created(bus)

    def on_created(user: str, role: str) -> None: ...

    with pytest.raises(TypeError) as caught:
        bus.on("user.created", on_created)
    message = str(caught.value)
    assert f"on_created ({line_of(on_created)})" in message
    assert "event 'user.created'" in message
    assert "user.created(user: str, *, admin: bool = False)" in message
    assert "it needs 'role', which event 'user.created' doesn't pass" in message
    assert bus.hooks() == []  # nothing registered

    def no_star(*args: Any) -> None: ...  # takes every positional, but not admin=

    with pytest.raises(TypeError, match="unexpected keyword argument 'admin'"):
        bus.on("user.created", no_star)


@pytest.mark.parametrize(
    "hook",
    [
        lambda user, admin=False: None,
        lambda user, *, admin=False: None,
        lambda user, **kwargs: None,
        lambda *args, **kwargs: None,
        lambda user, admin=False, extra=None: None,
    ],
)
def test_hooks_that_accept_the_spec_register(hook: Callable[..., Any]) -> None:
    bus = EventBus()
    ev = declare_user_created(bus)
    ev.on(hook)
    ev.emit("ada", admin=True)
    ev.emit("ada")


@pytest.mark.parametrize(
    ("hook", "reason"),
    [
        (lambda *args: None, "unexpected keyword argument 'admin'"),
        (lambda person, admin=False: None, "it needs 'person'"),
        (lambda user, extra, admin=False: None, "it needs 'extra'"),
        (lambda *, extra: None, "it needs 'extra'"),
    ],
)
def test_hooks_that_cannot_take_some_emission_are_refused(
    hook: Callable[..., Any], reason: str
) -> None:
    bus = EventBus()
    ev = declare_user_created(bus)
    with pytest.raises(TypeError, match=reason):
        ev.on(hook)
    assert bus.hooks() == []


def test_patterns_decorators_scopes_and_subscribe_are_checked_too() -> None:
    bus = EventBus()
    declare_user_created(bus)
    bus.event("user.deleted")(lambda user: None)
    with pytest.raises(TypeError, match=r"event 'user\.deleted'"):
        bus.on("user.*", lambda user, admin: None)  # user.deleted has no admin
    bus.on("user.*", lambda user, **kwargs: None)  # fits both
    with pytest.raises(TypeError, match=r"event 'user\.created'"):
        bus.on("user.created")(lambda role: None)
    with bus.scope() as scope, pytest.raises(TypeError):
        scope.on("user.created", lambda role: None)

    class Listener:
        hook_events = ("user.created",)

        def user_created(self, role: str) -> None: ...

    with pytest.raises(TypeError, match=r"event 'user\.created'"):
        bus.subscribe(Listener(), events={"user_created": "user.created"})
    assert len(bus.hooks()) == 1


def test_with_name_hooks_take_the_name_first() -> None:
    bus = EventBus()
    ev = declare_user_created(bus)
    with pytest.raises(TypeError, match=r"after the event's name \(with_name=True\)"):
        bus.on("user.created", lambda *, user, admin=False: None, with_name=True)
    ev.on(lambda name, user, admin=False: None, with_name=True)


def test_hooks_are_checked_only_for_events_not_for_hook_points_of_the_same_name() -> None:
    bus = EventBus()
    forward = bus.hookable("forward")(lambda x: x)
    declare_user_created(bus, "forward")
    bus.post("forward", lambda ctx: None)  # a post hook takes ctx: no spec applies
    assert forward(1) == 1


def test_hooks_registered_before_the_declaration_are_checked_by_it_all_listed() -> None:
    bus = EventBus()

    def good(user: str, *, admin: bool = False) -> None: ...

    def bad_one(user: str, role: str) -> None: ...

    def bad_two(role: str) -> None: ...

    bus.on("user.created", good)
    bus.on("user.created", bad_one)
    bus.on("user.*", bad_two)
    with pytest.raises(TypeError) as caught:
        declare_user_created(bus)
    message = str(caught.value)
    assert "2 hooks registered before" in message
    assert f"({line_of(bad_one)})" in message
    assert f"({line_of(bad_two)})" in message
    assert line_of(good) not in message
    # The declaration did not happen: the name is still free.
    bus.on("user.created", lambda role: None)
    for hook in (bad_one, bad_two):
        for handle in bus.handles_of(hook):
            handle.remove()
    bus.clear("user.created")
    bus.on("user.created", good)
    declare_user_created(bus)


def _race_declaration_and_bad_hook() -> List[str]:
    bus = EventBus()
    barrier = threading.Barrier(2, timeout=10)
    outcome: List[str] = []

    def register() -> None:
        barrier.wait()
        try:
            bus.on("e", lambda x, y: None)  # needs y: can't take e(x)
            outcome.append("registered")
        except TypeError:
            outcome.append("hook refused")

    def declare() -> None:
        barrier.wait()
        try:
            bus.event("e")(lambda x: None)
            outcome.append("declared")
        except TypeError:
            outcome.append("declaration refused")

    threads = [threading.Thread(target=register), threading.Thread(target=declare)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    return sorted(outcome)


def test_a_declaration_racing_a_bad_hook_lets_exactly_one_of_them_through() -> None:
    """Hooks are checked outside the lock; the loser of the race must still be refused."""
    for _ in range(100):
        assert _race_declaration_and_bad_hook() in (
            ["declared", "hook refused"],
            ["declaration refused", "registered"],
        )


def test_a_hook_checked_while_an_event_is_declared_is_checked_again() -> None:
    """The declaration lands between the registration's check and its insertion."""
    bus = EventBus()
    bus.event("other")(lambda y=None: None)

    class Hook:
        declared = False

        @property
        def __signature__(self) -> inspect.Signature:
            if not Hook.declared:  # the first look: another thread declares "e" now
                Hook.declared = True
                bus.event("e")(lambda x: None)
            return inspect.Signature([inspect.Parameter("y", inspect.Parameter.KEYWORD_ONLY)])

        def __call__(self, *, y: Any) -> None: ...

    with pytest.raises(TypeError, match="event 'e'"):
        bus.on("*", Hook())
    assert bus.hooks() == []


def test_a_declaration_landing_as_a_plain_registration_takes_the_lock_is_seen() -> None:
    """The common path of ``on`` decides "nothing to check" before the lock; a
    declaration that lands between that and the lock must still check the hook."""
    bus = EventBus()  # nothing declared yet: bus.on takes the flat path
    real = bus.registry._lock

    class DeclaringFirst:
        armed = True

        def acquire(self, blocking: bool = True) -> bool:
            if DeclaringFirst.armed:  # another thread's declaration, just in time
                DeclaringFirst.armed = False
                bus.event("e")(lambda x: None)
            return real.acquire(blocking)

        def release(self) -> None:
            real.release()

        def __enter__(self) -> bool:
            return self.acquire()

        def __exit__(self, *exc: object) -> None:
            real.release()

    bus.registry._lock = DeclaringFirst()  # type: ignore[assignment]
    with pytest.raises(TypeError, match="event 'e'"):
        bus.on("e", lambda x, y: None)  # needs y: can't take e(x)
    assert not DeclaringFirst.armed
    assert bus.hooks() == []


def test_redeclaring_with_the_same_spec_is_allowed_and_a_different_one_raises() -> None:
    bus = EventBus()
    first = declare_user_created(bus)
    again = declare_user_created(bus)  # a module re-imported
    assert again.name == first.name
    with pytest.raises(TypeError, match=r"already declared as user\.created\(user: str"):
        bus.event("user.created")(lambda user, role: None)
    with pytest.raises(TypeError, match="historic"):

        @bus.event("user.created", historic=True)
        def user_created(user: str, *, admin: bool = False) -> None: ...


# --- checking emissions ---------------------------------------------------------------------


@pytest.mark.parametrize("how", ["emit", "collect", "first", "emit_async", "collect_async"])
def test_emitting_wrong_arguments_raises_before_any_hook_runs(how: str) -> None:
    bus = EventBus()
    declare_user_created(bus)
    ran: List[Any] = []
    bus.on("user.created", lambda *args, **kwargs: ran.append(args))
    method = getattr(bus, how)

    def call() -> None:
        result = method("user.created", "ada", "extra")
        if inspect.iscoroutine(result):
            asyncio.run(result)

    with pytest.raises(TypeError) as caught:
        call()
    assert str(caught.value) == (
        "event 'user.created' was emitted with arguments that don't match its spec "
        "user.created(user: str, *, admin: bool = False): got (str, str), "
        "too many positional arguments; no hook was called"
    )
    assert ran == []


@pytest.mark.parametrize(
    "options", [{}, {"once": True}, {"priority": 3}, {"weak": False, "target": "x"}]
)
def test_emit_checks_arguments_on_every_dispatch_path(options: Any) -> None:
    bus = EventBus()
    ev = declare_user_created(bus)
    ran: List[Any] = []
    ev.on(lambda *args, **kwargs: ran.append(args), **options)
    for args, kwargs in [((), {}), (("a",), {"adm": 1}), (("a", "b"), {})]:
        with pytest.raises(TypeError, match="don't match its spec"):
            bus.emit("user.created", *args, **kwargs)
    assert ran == []


def _same_shape_hook(ran: List[Any]) -> Callable[..., Any]:
    def hook(user: str, *, admin: bool = False) -> None:
        ran.append(user)

    return hook


def _wrapped_hook(ran: List[Any]) -> Callable[..., Any]:
    def inner(user: str, *, admin: bool = False) -> None: ...

    @functools.wraps(inner)  # inspect.signature says (user, *, admin=False); the code says *args
    def hook(*args: Any, **kwargs: Any) -> None:
        ran.append(args)

    return hook


@pytest.mark.parametrize("make", [_same_shape_hook, _wrapped_hook])
def test_the_first_hook_checks_the_arguments_only_when_its_own_code_has_the_spec_shape(
    make: Callable[[List[Any]], Callable[..., Any]],
) -> None:
    bus = EventBus()
    ev = declare_user_created(bus)
    ran: List[Any] = []
    ev.on(make(ran))
    ev.on(lambda *args, **kwargs: ran.append("second"))
    for args, kwargs in [
        ((), {}),
        (("a",), {"adm": 1}),
        (("a", "b"), {}),
        ((), {"user": 1, "x": 2}),
    ]:
        with pytest.raises(TypeError, match="don't match its spec") as caught:
            bus.emit("user.created", *args, **kwargs)
        assert caught.value.__cause__ is None
    assert ran == []
    bus.emit("user.created", user="ada")
    assert len(ran) == 2


def test_emit_of_a_declared_event_without_hooks_checks_too() -> None:
    bus = EventBus()
    declare_user_created(bus)
    bus.emit("user.created", "ada")
    with pytest.raises(TypeError, match="don't match its spec"):
        bus.emit("user.created")


def test_a_type_error_raised_inside_a_hook_is_not_mistaken_for_bad_arguments() -> None:
    bus = EventBus()
    ev = declare_user_created(bus)

    def hook(user: str, *, admin: bool = False) -> None:
        raise TypeError("the hook's own bug")

    ev.on(hook)
    with pytest.raises(TypeError, match="the hook's own bug") as caught:
        ev.emit("ada")
    assert any("raised by" in note for note in getattr(caught.value, "__notes__", []))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.sampled_from(["admin", "user", "role"]), st.booleans(), max_size=2),
    st.integers(0, 2),
)
def test_emit_raises_exactly_when_the_arguments_do_not_bind(
    args: List[int], kwargs: Any, hooks: int
) -> None:
    bus = EventBus()
    ev = declare_user_created(bus)
    ran: List[Any] = []
    for _ in range(hooks):
        ev.on(lambda *a, **k: ran.append((a, k)))
    try:
        ev.signature.bind(*args, **kwargs)
    except TypeError:
        with pytest.raises(TypeError, match="don't match its spec"):
            bus.emit("user.created", *args, **kwargs)
        assert ran == []
    else:
        bus.emit("user.created", *args, **kwargs)
        assert ran == [(tuple(args), kwargs)] * hooks


def test_undeclared_names_are_not_checked() -> None:
    bus = EventBus()
    declare_user_created(bus)
    bus.on("other", lambda: None)
    with pytest.raises(TypeError, match="positional argument"):
        bus.emit("other", 1)  # the hook's own TypeError: nothing declared here


@pytest.mark.parametrize("shape", ["the spec's", "another"])
def test_after_remove_and_after_emit_nothing_holds_the_hook_or_the_arguments(shape: str) -> None:
    class Payload:
        pass

    def make_hook() -> Callable[..., Any]:
        if shape == "the spec's":

            def hook(user: Any, *, admin: bool = False) -> None: ...

        else:

            def hook(*args: Any, **kwargs: Any) -> None: ...  # type: ignore[misc]

        return hook

    bus = EventBus()
    ev = declare_user_created(bus)
    hook = make_hook()
    ev.on(hook)
    (handle,) = bus.handles_of(hook)
    payload = Payload()
    hook_ref, payload_ref = weakref.ref(hook), weakref.ref(payload)
    gc.disable()
    try:
        ev.emit(payload, admin=True)
        try:
            ev.emit(payload, 1)
        except TypeError as error:
            assert "don't match its spec" in str(error)  # noqa: PT017
        del payload
        assert payload_ref() is None
        handle.remove()
        del hook, handle  # the user's handle holds its hook, as any handle does
        assert hook_ref() is None
    finally:
        gc.enable()


# --- first ----------------------------------------------------------------------------------


def test_first_returns_the_first_result_that_is_not_none_and_stops() -> None:
    bus = EventBus()
    ran: List[str] = []

    def hook(label: str, result: Any) -> Callable[[], Any]:
        def run() -> Any:
            ran.append(label)
            return result

        return run

    bus.on("find", hook("a", None), priority=3)
    bus.on("find", hook("b", 0), priority=2)
    bus.on("find", hook("c", "never"), priority=1)
    assert bus.first("find") == 0
    assert ran == ["a", "b"]
    assert bus.first("nobody") is None


def test_first_works_with_once_and_the_error_policies() -> None:
    bus = EventBus(errors="collect")
    bus.on("find", lambda: 1 / 0, priority=5)
    bus.on("find", lambda: "found", once=True)
    with pytest.raises(hookbus.HookError):
        bus.first("find")
    assert bus.hooks("find")[0].priority == 5  # the once hook ran, and is gone
    assert len(bus.hooks("find")) == 1


def test_first_refuses_async_hooks_like_emit() -> None:
    bus = EventBus()

    async def hook() -> str:
        return "x"

    bus.on("find", hook)
    with pytest.raises(TypeError, match="emit_async"):
        bus.first("find")


# --- historic events ------------------------------------------------------------------------


def test_a_historic_hook_registered_late_gets_every_past_emission_in_order() -> None:
    bus = EventBus()

    @bus.event(historic=True)
    def configured(config: str, *, verbose: bool = False) -> None: ...

    configured.emit("a")
    configured.emit("b", verbose=True)
    seen: List[Any] = []
    configured.on(lambda config, verbose=False: seen.append((config, verbose)))
    assert seen == [("a", False), ("b", True)]
    configured.emit("c")
    assert seen == [("a", False), ("b", True), ("c", False)]
    late: List[Any] = []
    bus.on("configured", lambda config, **kwargs: late.append(config), once=True)
    assert late == ["a"]  # once: the first past emission, and then it is gone


def test_a_replay_error_follows_the_policy_and_the_hook_stays_registered() -> None:
    bus = EventBus()
    bus.event("configured", historic=True)(lambda n, /: None)
    bus.emit("configured", 0)
    bus.emit("configured", 1)

    def hook(n: int, /) -> None:
        seen.append(1 / n)

    seen: List[float] = []
    with pytest.raises(ZeroDivisionError) as caught:
        bus.on("configured", hook)
    assert any("raised by" in note for note in getattr(caught.value, "__notes__", []))
    assert bus.handles_of(hook)  # registered; the replay stopped at the error
    bus.emit("configured", 2)
    assert seen == [0.5]
    collecting = EventBus(errors="collect")
    collecting.event("configured", historic=True)(lambda n, /: None)
    collecting.emit("configured", 0)
    collecting.emit("configured", 4)
    seen.clear()
    with pytest.raises(hookbus.HookError):
        collecting.on("configured", hook)
    assert seen == [0.25]  # the collect policy went on to the next emission


def test_forget_drops_the_history_and_the_event_stays_historic() -> None:
    bus = EventBus()

    @bus.event(historic=True)
    def configured(config: str, /) -> None: ...

    configured.emit("a")
    bus.forget("configured")
    configured.emit("b")
    seen: List[str] = []
    configured.on(seen.append)
    assert seen == ["b"]
    with pytest.raises(ValueError, match="not a historic event"):
        bus.forget("nothing")


def test_history_releases_its_arguments_when_forgotten() -> None:
    class Config:
        pass

    bus = EventBus()

    @bus.event(historic=True)
    def configured(config: Config) -> None: ...

    config = Config()
    ref = weakref.ref(config)
    configured.emit(config)
    del config
    gc.collect()
    assert ref() is not None  # history holds it: that is what historic means
    bus.forget("configured")
    gc.collect()
    assert ref() is None


def test_historic_events_refuse_async_hooks_which_the_replay_could_not_await() -> None:
    bus = EventBus()
    bus.event("configured", historic=True)(lambda config: None)

    async def hook(config: str) -> None: ...

    with pytest.raises(TypeError, match="historic"):
        bus.on("configured", hook)


def test_historic_replay_and_live_emissions_reach_each_hook_exactly_once() -> None:
    bus = EventBus()
    bus.event("tick", historic=True)(lambda n, /: None)
    hooks: List[List[int]] = []
    stop = threading.Event()

    def emitter() -> None:
        n = 0
        while not stop.is_set() and n < 2000:
            bus.emit("tick", n)
            n += 1

    thread = threading.Thread(target=emitter)
    thread.start()
    try:
        for _ in range(20):
            seen: List[int] = []
            hooks.append(seen)
            bus.on("tick", seen.append)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    for seen in hooks:
        assert sorted(seen) == list(range(len(seen))), "each emission exactly once"


# --- hooks that match nothing ---------------------------------------------------------------


def test_check_pending_lists_every_hook_that_matches_nothing_with_close_names() -> None:
    bus = EventBus()
    bus.event("Motor.spin")(lambda rpm: None)

    @bus.hookable("forward")
    def forward(x: int) -> int:
        return x

    bus.emit("seen.at.runtime")
    bus.on("Motor.spin", lambda rpm: None)
    bus.on("seen.at.runtime", lambda: None)
    bus.post("forward", lambda ctx: None)
    bus.on("Motor.*", lambda rpm: None)

    def typo(rpm: int) -> None: ...

    bus.on("Motr.spin", typo)
    bus.pre("forwrd", lambda ctx: None)
    bus.on("nothing.*", lambda: None)
    with pytest.raises(UnknownNameError) as caught:
        bus.check_pending()
    message = str(caught.value)
    assert message.startswith("3 hooks match no declared event, hook point or emitted event")
    assert f"({line_of(typo)})" in message
    assert "'Motr.spin'" in message
    assert "did you mean 'Motor.spin'?" in message
    assert "did you mean 'forward'?" in message
    assert "'nothing.*'" in message
    assert {h.name for h in caught.value.handles} == {"Motr.spin", "forwrd", "nothing.*"}
    for handle in caught.value.handles:
        handle.remove()
    assert bus.check_pending() is None


def test_check_pending_says_when_a_name_is_in_the_other_namespace() -> None:
    bus = EventBus()
    forward = bus.hookable("forward")(lambda x: x)
    bus.on("forward", lambda ctx: None)
    with pytest.raises(UnknownNameError, match="'forward' is a hook point: use pre, post"):
        bus.check_pending()
    assert forward(1) == 1


def test_strict_refuses_unknown_names_at_once_with_close_names() -> None:
    bus = EventBus(strict=True)
    bus.event("Motor.spin")(lambda rpm: None)
    forward = bus.hookable("forward")(lambda x: x)  # points live as long as their wrapper
    with pytest.raises(UnknownNameError, match=r"did you mean 'Motor\.spin'"):
        bus.on("Motr.spin", lambda rpm: None)
    with pytest.raises(UnknownNameError, match="did you mean 'forward'"):
        bus.post("forwad", lambda ctx: None)
    bus.on("Motor.spin", lambda rpm: None)
    bus.post("forward", lambda ctx: None)
    bus.on("Motor.*", lambda rpm: None)  # patterns wait for check_pending()
    bus.on("Nothing.*", lambda: None)
    assert len(bus.hooks()) == 4
    with pytest.raises(UnknownNameError, match="Nothing"):
        bus.check_pending()
    assert bus.strict is True
    assert forward(1) == 1


# --- hook points: listing, and default names shared by accident -----------------------------


def test_points_lists_name_kind_and_source() -> None:
    bus = EventBus()

    @bus.hookable
    def load(path: str) -> str:
        return path

    class Model:
        @bus.hookable("Model.forward")
        def forward(self, x: int) -> int:
            return x

    listed = {point.name: point for point in bus.points()}
    assert listed[load.__qualname__].kind == "function"
    assert listed[load.__qualname__].where == line_of(load.__wrapped__)  # type: ignore[attr-defined]
    assert listed["Model.forward"].kind == "method"
    assert listed["Model.forward"].where.startswith(HERE)
    assert [p.name for p in bus.points()] == sorted(listed)
    assert Model


def _function_in_module(module_name: str, qualname: str) -> Any:
    module = types.ModuleType(module_name)
    exec(f"def {qualname}(x):\n    return x\n", module.__dict__)
    fn = module.__dict__[qualname]
    fn.__module__ = module_name
    return fn


def test_a_default_name_taken_by_another_modules_function_warns_naming_both() -> None:
    bus = EventBus()
    first = bus.hookable(_function_in_module("pkg.a", "forward"))
    with pytest.warns(hookbus.SharedNameWarning) as caught:
        second = bus.hookable(_function_in_module("pkg.b", "forward"))
    message = str(caught[0].message)
    assert "pkg.a" in message
    assert "pkg.b" in message
    assert "@hookable('forward')" in message  # the way to say sharing is meant
    assert first(1) == second(1) == 1


def test_no_warning_for_the_same_module_or_an_explicit_name() -> None:
    bus = EventBus()
    keep = [bus.hookable(_function_in_module("pkg.a", "forward"))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        keep.append(bus.hookable(_function_in_module("pkg.a", "forward")))  # a reload
        keep.append(bus.hookable("forward")(_function_in_module("pkg.c", "forward")))
    assert len(keep) == 3


def test_the_shared_name_warning_as_an_error_leaves_nothing_half_registered() -> None:
    bus = EventBus()
    keep = bus.hookable(_function_in_module("pkg.a", "forward"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(hookbus.SharedNameWarning):
            bus.hookable(_function_in_module("pkg.b", "forward"))
    assert [p.where for p in bus.points()] == [p.where for p in bus.points()[:1]]
    assert len(bus.points()) == 1
    assert keep(2) == 2


# --- the module-level API is the bus API -----------------------------------------------------


def test_every_public_bus_method_is_a_module_level_function_on_the_default_bus() -> None:
    methods = [
        name
        for name, value in inspect.getmembers(EventBus)
        if not name.startswith("_") and callable(value)
    ]
    assert {"collect_async", "handles_of", "events", "trace", "event", "first"} <= set(methods)
    for name in methods:
        function = getattr(hookbus, name)
        assert function == getattr(hookbus.default_bus, name), name
        assert name in hookbus.__all__, name
        assert inspect.signature(function) == inspect.signature(getattr(hookbus.default_bus, name))


# --- every decorator form returns the function ---------------------------------------------


def test_a_bare_event_on_leaves_the_decorated_name_the_function() -> None:
    # blinker's and psygnal's habit: @signal.connect, @signal.connect with no call.
    bus = EventBus()
    ev = declare_user_created(bus)
    seen: List[Any] = []

    @ev.on
    def welcome(user: str, *, admin: bool = False) -> str:
        seen.append(user)
        return user.upper()

    @ev.on(priority=5)
    def audit(user: str, *, admin: bool = False) -> None:
        seen.append(("audit", user))

    def named(event: str, user: str, *, admin: bool = False) -> None:
        seen.append((event, user))

    assert ev.on(named, with_name=True) is named
    ev.emit("ada")
    assert welcome("bob") == "BOB"  # 'Handle' object is not callable, before
    assert seen == [("audit", "ada"), "ada", ("user.created", "ada"), "bob"]
    assert [h.hook for h in bus.handles_of(welcome)] == [welcome]
    assert [h.priority for h in bus.handles_of(audit)] == [5]
