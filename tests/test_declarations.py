"""Declarations: a declared event's spec checks its hooks at registration and its arguments
at emission; hooks that match nothing are listed, and a strict bus refuses unknown names."""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from typing import Any, Callable, List

import pytest
from hook_helpers import declare_user_created, line_of
from hypothesis import given, settings
from hypothesis import strategies as st

import hookbus
from hookbus import EventBus, UnknownNameError

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
    lock = bus.registry._lock

    class DeclaringFirst(list):  # the lock's token list: what taking the lock pops
        armed = True

        def pop(self, *index: int) -> Any:
            if DeclaringFirst.armed:  # another thread's declaration, just in time
                DeclaringFirst.armed = False
                bus.event("e")(lambda x: None)
            return super().pop(*index)

    lock.free = DeclaringFirst(lock.free)
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


# --- strict buses catch typos in emitted names -----------------------------------------


def test_a_strict_bus_refuses_to_emit_an_unknown_name_with_close_names() -> None:
    bus = EventBus(strict=True)

    @bus.event
    def order_paid(order: str) -> None: ...

    for emit in (bus.emit, bus.collect, bus.first):
        with pytest.raises(UnknownNameError, match="did you mean 'order_paid'"):
            emit("order_payd", "o-1")


def test_a_strict_bus_emits_declared_names_and_hook_point_names() -> None:
    bus = EventBus(strict=True)

    @bus.event
    def ping() -> None: ...

    @bus.hookable("load")
    def load() -> None: ...

    bus.emit("ping")
    bus.emit("load")  # a hook point's name is known


def test_a_non_strict_bus_still_emits_anything() -> None:
    EventBus().emit("never.declared")


# --- optional hooks (pluggy's optionalhook) -----------------------------------------------


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
