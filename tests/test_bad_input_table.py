"""One table of bad input across the API.

Each case must raise the documented exception type, with a message that names
what was given and what is accepted, and leave the bus exactly as it was: the
same hooks (with the same options, in the same order), the same event names,
the same error policy, and the same behaviour of its hook points.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Callable, List, NamedTuple, Optional, Type

import pytest

from hookbus import CallContext, EventBus


class Env:
    """A bus with a bit of everything on it, for the cases to get wrong."""

    def __init__(self) -> None:
        self.bus = EventBus("table")
        self.other = EventBus("other")
        self.log: List[str] = []
        bus = self.bus

        @bus.hookable("p")
        def point(x: int) -> int:
            return x + 1

        @bus.hookable("ap")
        async def async_point(x: int) -> int:
            return x + 1

        self.point = point
        self.async_point = async_point
        self.handle = bus.on("e", self.record)
        bus.on("train.*", self.record, priority=5, once=True)
        bus.pre("p", lambda ctx: self.log.append("pre"))
        bus.post("p", lambda ctx: self.log.append("post"), priority="HIGH")
        self.model: Any = None
        self.net: Any = None

    def record(self, *args: Any) -> None:
        self.log.append("event")

    def declare(self) -> None:
        self.bus.event("d")(lambda x, /: None)
        self.bus.event("h", historic=True)(lambda x, /: None)

    def attach_model(self) -> None:
        torch = pytest.importorskip("torch")
        import hookbus.torch

        self.model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
        self.net = hookbus.torch.attach(self.model, self.bus)

    def state(self) -> Any:
        """Everything a user can observe of the bus."""
        bus = self.bus
        hooks = [
            (h.kind, h.name, h.priority, h.once, h.weak, h.target, h.hook, h.active)
            for h in bus.hooks()
        ]
        per_name = {name: bus.hooks(name) for name in ("e", "train.step", "p", "ap")}
        before = len(self.log)
        result = self.point(1)
        calls = self.log[before:]
        del self.log[before:]
        return hooks, per_name, bus.events(), bus.errors, result, calls


async def async_hook(*args: Any) -> None:
    pass


def no_argument_around() -> Any:
    yield


def run_point_with(env: Env, kind: str, hook: Callable[[CallContext], Any]) -> None:
    """Register ``hook`` for the length of one call of the hook point."""
    with getattr(env.bus, kind)("p", hook):
        env.point(1)


def set_args(value: Any) -> Callable[[CallContext], None]:
    def hook(ctx: CallContext) -> None:
        ctx.args = value

    return hook


def set_kwargs(value: Any) -> Callable[[CallContext], None]:
    def hook(ctx: CallContext) -> None:
        ctx.kwargs = value

    return hook


class Case(NamedTuple):
    call: Callable[[Env], Any]
    error: Type[BaseException]
    given: str  # the message quotes what was given...
    accepted: str  # ...and says what is accepted
    setup: Optional[Callable[[Env], Any]] = None
    torch: bool = False


CASES = {
    # --- non-callable hooks
    "on: an int as hook": Case(
        lambda env: env.bus.on("e", 42), TypeError, "int 42", "accepted: a function"
    ),
    "pre: a str as hook": Case(
        lambda env: env.bus.pre("p", "print"), TypeError, "str 'print'", "accepted: a function"
    ),
    "decorator on a non-callable": Case(
        lambda env: env.bus.on("e", priority=1)(3.5), TypeError, "float 3.5", "accepted:"
    ),
    "wrap: a non-callable": Case(
        lambda env: env.bus.wrap(42, "q"), TypeError, "int 42", "accepted: functions"
    ),
    # --- declared events
    "event: a stub that is not a function": Case(
        lambda env: env.bus.event(42), TypeError, "int 42", "accepted: a plain 'def' function"
    ),
    "event: an async stub": Case(
        lambda env: env.bus.event(async_hook), TypeError, "'async def'", "accepted: a plain"
    ),
    "event: historic= not a bool": Case(
        lambda env: env.bus.event("x", historic="yes"), TypeError, "str 'yes'", "True or False"
    ),
    "event: declared again with another spec": Case(
        lambda env: env.bus.event("d")(lambda y, z: None),
        TypeError,
        "d(y, z)",
        "A second declaration must be the same",
        setup=Env.declare,
    ),
    "event: earlier hooks that don't fit the spec": Case(
        lambda env: env.bus.event("e")(lambda x: None),
        TypeError,
        "hook",
        "Remove or change it",
    ),
    "on: a hook that doesn't accept the spec": Case(
        lambda env: env.bus.on("d", lambda x, y: None),
        TypeError,
        "hook <lambda>",
        "A hook takes the spec's parameters it names",
        setup=Env.declare,
    ),
    "emit: wrong arguments for a declared event": Case(
        lambda env: env.bus.emit("d", 1, 2),
        TypeError,
        "got (int, int)",
        "d(x, /)",
        setup=Env.declare,
    ),
    "forget: not a historic event": Case(
        lambda env: env.bus.forget("d"),
        ValueError,
        "'d'",
        "historic events of this bus: 'h'",
        setup=Env.declare,
    ),
    # --- bad names and patterns
    "event name: an int": Case(
        lambda env: env.bus.on(42, print), TypeError, "int 42", "accepted: a non-empty string"
    ),
    "event name: empty": Case(
        lambda env: env.bus.on("", print), ValueError, "''", "non-empty string"
    ),
    "event name: padded with spaces": Case(
        lambda env: env.bus.on(" e ", print), ValueError, "' e '", "without leading or trailing"
    ),
    "pattern: unclosed [": Case(
        lambda env: env.bus.on("layer.[0-3", print), ValueError, "'layer.[0-3'", "accepted:"
    ),
    "emit: a name with spaces around": Case(
        lambda env: env.bus.emit(" train "), ValueError, "' train '", "without leading"
    ),
    "emit: None as name": Case(
        lambda env: env.bus.emit(None), TypeError, "NoneType None", "accepted: a non-empty"
    ),
    "hook point name: empty": Case(
        lambda env: env.bus.hookable(""), ValueError, "''", "non-empty"
    ),
    "paused: an int": Case(
        lambda env: env.bus.paused(7), TypeError, "int 7", "accepted: a non-empty string"
    ),
    "clear: empty name": Case(lambda env: env.bus.clear(""), ValueError, "''", "non-empty"),
    "hooks: an int as name": Case(
        lambda env: env.bus.hooks(3), TypeError, "int 3", "accepted: a non-empty string"
    ),
    # --- bad priorities
    "priority: a float": Case(
        lambda env: env.bus.on("e", print, priority=1.5), TypeError, "float 1.5", "an int"
    ),
    "priority: an unknown name": Case(
        lambda env: env.bus.on("e", print, priority="urgent"), ValueError, "'urgent'", "HIGHEST"
    ),
    "priority: a bool": Case(
        lambda env: env.bus.post("p", print, priority=True), TypeError, "bool True", "an int"
    ),
    "priority: None": Case(
        lambda env: env.bus.on("e", print, priority=None), TypeError, "NoneType None", "an int"
    ),
    # --- unknown or ill-typed options
    "option: misspelt": Case(
        lambda env: env.bus.on("e", print, prio=1), TypeError, "'prio'", "accepted: priority"
    ),
    "option: misspelt in decorator form": Case(
        lambda env: env.bus.pre("p", wek=True), TypeError, "'wek'", "did you mean 'weak'"
    ),
    "option: once not a bool": Case(
        lambda env: env.bus.on("e", print, once="yes"), TypeError, "str 'yes'", "True or False"
    ),
    "option: weak not a bool": Case(
        lambda env: env.bus.on("e", print, weak=1), TypeError, "int 1", "True or False"
    ),
    "option: weak on a callable without weak references": Case(
        lambda env: env.bus.on("e", operator.itemgetter(0), weak=True),
        TypeError,
        "itemgetter",
        "accepted: functions, bound methods",
    ),
    "error policy: unknown": Case(
        lambda env: setattr(env.bus, "errors", "ignore"), ValueError, "'ignore'", "accepted: raise"
    ),
    "error policy: unknown, at construction": Case(
        lambda env: EventBus(errors="strict"), ValueError, "'strict'", "accepted: raise"
    ),
    # --- wrong pre/post hook return shapes and bad ctx assignments
    "pre hook returns new args (torch style)": Case(
        lambda env: run_point_with(env, "pre", lambda ctx: (5,)),
        TypeError,
        "returned tuple",
        "ctx.args = ...",
    ),
    "post hook returns a result": Case(
        lambda env: run_point_with(env, "post", lambda ctx: 0),
        TypeError,
        "returned int",
        "ctx.result = ...",
    ),
    "ctx.args = a list": Case(
        lambda env: run_point_with(env, "pre", set_args([5])),
        TypeError,
        "got list",
        "assign a tuple",
    ),
    "ctx.kwargs = a list of pairs": Case(
        lambda env: run_point_with(env, "pre", set_kwargs([("x", 1)])),
        TypeError,
        "got list",
        "assign a dict",
    ),
    "ctx.kwargs with a non-str key": Case(
        lambda env: run_point_with(env, "pre", set_kwargs({1: 2})),
        TypeError,
        "got a key of type int",
        "must be str",
    ),
    "ctx.recover() in a pre hook": Case(
        lambda env: run_point_with(env, "pre", lambda ctx: ctx.recover(0)),
        RuntimeError,
        "'pre' hook",
        "for exception hooks",
    ),
    # --- hooks around calls that can't be called as hook(ctx), refused at registration
    "pre hook of two arguments": Case(
        lambda env: env.bus.pre("p", lambda args, kwargs: None),
        TypeError,
        "<lambda>(args, kwargs)",
        "hook(ctx)",
    ),
    "post hook with a required keyword": Case(
        lambda env: env.bus.post("p", lambda ctx, *, scale: None),
        TypeError,
        "<lambda>(ctx, *, scale)",
        "hook(ctx)",
    ),
    "around hook of no argument": Case(
        lambda env: env.bus.around("p", no_argument_around),
        TypeError,
        "no_argument_around()",
        "hook(ctx)",
    ),
    # --- async hooks where they can't be awaited
    "async pre hook on a sync point": Case(
        lambda env: env.bus.pre("p", async_hook), TypeError, "async_hook", "async hook point"
    ),
    "async pattern hook matching a sync point": Case(
        lambda env: env.bus.post("*", async_hook),
        TypeError,
        "sync hook point 'p'",
        "async hook point",
    ),
    "sync point under an async pattern hook": Case(
        lambda env: env.bus.wrap(len, "a.len"),
        TypeError,
        "'a.len'",
        "async hook point",
        setup=lambda env: env.bus.pre("a.*", async_hook),
    ),
    "async hook reached from sync emit": Case(
        lambda env: env.bus.emit("ae"),
        TypeError,
        "async_hook",
        "emit_async",
        setup=lambda env: env.bus.on("ae", async_hook),
    ),
    "sync hook returning a coroutine to sync emit": Case(
        lambda env: env.bus.emit("ce"),
        TypeError,
        "returned a coroutine",
        "emit_async",
        setup=lambda env: env.bus.on("ce", functools.partial(lambda: async_hook())),
    ),
    # --- handles
    "removing a handle through another bus": Case(
        lambda env: env.other.registry.remove([env.handle]),
        ValueError,
        "<Handle event 'e'",
        "handle.remove()",
    ),
    # --- torch
    "torch: attach a non-module": Case(
        lambda env: __import__("hookbus.torch").torch.attach(object(), env.bus),
        TypeError,
        "got object",
        "torch.nn.Module",
        setup=lambda env: pytest.importorskip("torch"),
        torch=True,
    ),
    "torch: attach with a non-str prefix": Case(
        lambda env: __import__("hookbus.torch").torch.attach(env.model[0], env.bus, prefix=3),
        TypeError,
        "int 3",
        "must be a str",
        setup=Env.attach_model,
        torch=True,
    ),
    "torch: select a module that does not exist": Case(
        lambda env: env.net.post("2", print),
        ValueError,
        "'2'",
        "'0', '1'",
        setup=Env.attach_model,
        torch=True,
    ),
    "torch: a pattern that selects no module": Case(
        lambda env: env.net.pre("encoder.*", print),
        ValueError,
        "'encoder.*'",
        "'<root>', '0', '1'",
        setup=Env.attach_model,
        torch=True,
    ),
    "torch: select by a type absent from the model": Case(
        lambda env: env.net.pre(__import__("torch").nn.Conv2d, print),
        ValueError,
        "Conv2d",
        "Linear",
        setup=Env.attach_model,
        torch=True,
    ),
    "torch: a torch-style (module, args, output) forward hook": Case(
        lambda env: env.net.post("0", lambda module, args, output: None),
        TypeError,
        "<lambda>(module, args, output)",
        "hook(ctx)",
        setup=Env.attach_model,
        torch=True,
    ),
    "torch: select with a float": Case(
        lambda env: env.net.pre(1.5, print),
        TypeError,
        "float 1.5",
        "accepted: a name or glob pattern",
        setup=Env.attach_model,
        torch=True,
    ),
}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, id=name, marks=[pytest.mark.torch] if case.torch else [])
        for name, case in CASES.items()
    ],
)
def test_bad_input_is_refused_clearly_and_changes_nothing(case: Case) -> None:
    env = Env()
    if case.setup is not None:
        case.setup(env)
    before = env.state()
    with pytest.raises(case.error) as info:
        case.call(env)
    message = str(info.value)
    assert case.given in message, f"the message doesn't name what was given: {message}"
    assert case.accepted in message, f"the message doesn't say what is accepted: {message}"
    assert env.state() == before


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 20
    assert len([case for case in CASES.values() if not case.torch]) >= 20
