"""The crossings matrix on the torch adapter's kinds of point: the same model, three more rows.

``tests/test_crossings_matrix.py`` holds the model, the scenarios and the invariants; this
file adds a :class:`Driver` for each kind of point the torch adapter declares, and draws
its scenarios:

- a module: ``nn.Sequential(job=Raises())``, whose forward returns or raises as the
  scenario says; hooks registered with ``bus.pre(name, ...)`` or the attachment's
  ``net.pre(selector, ...)`` (the name, the module itself or a pattern);
- an operation point: a module calling ``torch.tanh`` twice, found by a discovery
  forward; hooks on ``"job:tanh.1"``, the call that returns or raises;
- ``every_module``: its point named ``"job"``, hooks registered on the bus or with
  ``every.pre(...)``; the module is called alone, so the point runs once per dispatch.

Where the docs state a rule of their own for a row, the driver says so and the model
follows (docs/concepts.md, "What runs when"): on a module and on ``every_module`` torch
re-raises an error of the forward or of a pre hook whatever the hooks do (a recovery, or
an exception hook or around hook raising instead, warns), each phase reads the hooks when
it runs, and ``every_module`` refuses ``ctx.skip()``. The scenarios add a lifecycle that
only these rows draw: every hook removed by another thread while the first hook runs. A
``KeyboardInterrupt`` raised by forward (or by the operation) is the call's ``"interrupt"``
draw; on ``every_module``, where nothing sees it go by, the around hooks that call started
are closed, and its argument let go of, at the point's next call, as documented.

Profiles (``HOOKBUS_HYPOTHESIS_PROFILE``, as for the core's matrix; CI runs ``ci``): ``dev``
runs 100 examples per row, ``ci`` 300; the pinned scenarios run once each. Measured on the
shared 2-core box at a load of 7 (``python -m pytest -q -p no:cacheprovider
tests/torch_adapter/test_crossings_matrix_torch.py``, pytest start-up and torch's import
included, two runs each): ``dev`` 4.8 to 5.0 s of CPU (10 to 13 s wall), ``ci`` 7.8 to 10.7 s
of CPU (17 to 25 s wall).
"""

from __future__ import annotations

import enum
import os
import warnings
from collections import OrderedDict
from typing import Any, Callable, ClassVar, Dict, FrozenSet, Iterator, List, Tuple

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from test_crossings_matrix import (
    CALL,
    HOOK_KINDS,
    LIFECYCLES,
    NAMES,
    RESULT,
    ROWS,
    RUNS,
    Bench,
    Boom,
    Driver,
    HookSpec,
    Interrupt,
    Scenario,
    _one,
    _pinned,
    add_driver,
    check,
    scenarios,
)
from torch import nn

import hookbus.torch
from hookbus import Handle
from hookbus._kinds import point_kind

settings.register_profile(
    "crossings-torch-dev",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "crossings-torch-ci",
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
PROFILE = "crossings-torch-" + os.environ.get("HOOKBUS_HYPOTHESIS_PROFILE", "dev")

TORCH_LIFECYCLES = (*LIFECYCLES, "remove_from_thread")

_CALL_HOOKS: FrozenSet[str] = frozenset({"around", "pre", "post", "exception"})


def _outcome(what: str) -> Any:
    """What the call does: raise as the model numbers it, or return ``RESULT``."""
    if what == "raise":
        raise Boom(CALL)
    if what == "interrupt":
        raise Interrupt(CALL)
    return RESULT


class Raises(nn.Module):
    """A forward that returns ``RESULT`` or raises, as the scenario's call says."""

    def __init__(self, outcome: str) -> None:
        super().__init__()
        self.outcome = outcome

    def forward(self, value: Any) -> Any:
        return _outcome(self.outcome)


class Operand:
    """What ``torch.tanh`` is called with: not a tensor, so the call reaches its
    ``__torch_function__``, which returns or raises as the scenario's call says."""

    def __init__(self, value: Any, outcome: str) -> None:
        self.value = value  # the call's argument: the operation point's ctx.args hold it
        self.outcome = outcome

    @classmethod
    def __torch_function__(
        cls, func: Any, types: Any, args: Tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        return _outcome(args[0].outcome)


class TwoTanh(nn.Module):
    """Calls ``torch.tanh`` twice; the second call, ``"job:tanh.1"``, is the point."""

    def __init__(self) -> None:
        super().__init__()
        self.outcome = "ok"

    def forward(self, value: Any) -> Any:
        torch.tanh(Operand(value, "ok"))  # type: ignore[arg-type]
        return torch.tanh(Operand(value, self.outcome))  # type: ignore[arg-type]


class OperationName(enum.Enum):
    JOB = "job:tanh.1"


class ModuleDriver(Driver):
    """A module of an attached model; hooks on the bus, or through the attachment."""

    name = row = "module"
    vias = ("bus", "net")
    recovers = False
    phase_reads = True

    def make(self, bench: Bench) -> Tuple[Callable[[Any], Any], Any]:
        leaf = Raises(bench.scenario.call)
        model = nn.Sequential(OrderedDict(job=leaf))
        bench.net = hookbus.torch.attach(model, bench.bus)  # type: ignore[attr-defined]
        return model, leaf

    def register(
        self, bench: Bench, spec: HookSpec, hook: Callable[..., Any], options: Dict[str, Any]
    ) -> Handle:
        if spec.via == "bus" or spec.kind == "event":  # an attachment registers no event hook
            return super().register(bench, spec, hook, options)
        net = bench.net  # type: ignore[attr-defined]
        selector = {"plain": "job", "enum": bench.subject, "pattern": "jo?"}[spec.name_form]
        handle: Handle = getattr(net, spec.kind)(selector, hook, **options)
        return handle


class OperationDriver(Driver):
    """The second ``torch.tanh`` call of a selected module's forward."""

    name, row = "operation", "operation"
    names: ClassVar[Dict[str, Any]] = {
        "plain": "job:tanh.1",
        "enum": OperationName.JOB,
        "pattern": "jo?:tanh.1",
    }
    vias = ("bus", "net")

    def make(self, bench: Bench) -> Tuple[Callable[[Any], Any], Any]:
        leaf = TwoTanh()
        model = nn.Sequential(OrderedDict(job=leaf))
        net = bench.net = hookbus.torch.attach(model, bench.bus)  # type: ignore[attr-defined]
        net.operations("job", "tanh")
        model(None)  # the discovery forward: the points exist from here on
        leaf.outcome = bench.scenario.call
        return model, leaf

    def register(
        self, bench: Bench, spec: HookSpec, hook: Callable[..., Any], options: Dict[str, Any]
    ) -> Handle:
        if spec.via == "bus" or spec.kind == "event":
            return super().register(bench, spec, hook, options)
        net = bench.net  # type: ignore[attr-defined]
        selector = self.names["pattern" if spec.name_form == "pattern" else "plain"]
        handle: Handle = getattr(net, spec.kind)(selector, hook, **options)
        return handle


_EVERY: List[Any] = []  # the every-module points of the example running: removed after it


class EveryModuleDriver(Driver):
    """``every_module``'s point, named ``"job"``; the module is called on its own."""

    name, row = "every_module", "every module"
    vias = ("bus", "every")
    recovers = False
    skips = False
    phase_reads = True
    interrupt_keeps_argument = True  # the call's entry waits for the point's next call
    interrupt_closes_late = True  # torch's global hooks see no KeyboardInterrupt

    def settle(self, bench: Bench) -> None:
        with warnings.catch_warnings():
            # What an around hook raises when closed then is a warning (the call is over).
            warnings.simplefilter("ignore", RuntimeWarning)
            nn.Identity()(None)  # any module call is the point's next call

    def make(self, bench: Bench) -> Tuple[Callable[[Any], Any], Any]:
        leaf = Raises(bench.scenario.call)
        every = hookbus.torch.every_module(bench.bus, name=NAMES["plain"])
        _EVERY.append(every)
        bench.every = every  # type: ignore[attr-defined]
        return leaf, leaf

    def register(
        self, bench: Bench, spec: HookSpec, hook: Callable[..., Any], options: Dict[str, Any]
    ) -> Handle:
        if spec.via == "bus" or spec.kind == "event":
            return super().register(bench, spec, hook, options)
        handle: Handle = getattr(bench.every, spec.kind)(hook, **options)  # type: ignore[attr-defined]
        return handle


TORCH_ROWS = tuple(
    add_driver(driver, _CALL_HOOKS).name
    for driver in (ModuleDriver(), OperationDriver(), EveryModuleDriver())
)


def test_the_library_s_table_runs_what_the_torch_rows_expect() -> None:
    """The model's table for the torch rows is the docs'; the library's must agree on the
    hook kinds the matrix draws (a module also runs its backward kinds, not drawn here)."""
    for name in TORCH_ROWS:
        assert set(point_kind(ROWS[name].row).runs) & set(HOOK_KINDS) == RUNS[name], name


@pytest.fixture(autouse=True)
def _no_point_left() -> Iterator[None]:
    yield
    _remove_every_module_points()


def _remove_every_module_points() -> None:
    # torch's global hooks outlive an example that failed: never into the next one.
    while _EVERY:
        _EVERY.pop().remove()


def _check(scenario: Scenario) -> None:
    try:
        check(scenario)
    finally:
        _remove_every_module_points()


# The crossings that once broke the torch rows, pinned.
_ONCE_BROKEN = (
    _pinned("module", (_one("around"),), call="raise"),
    _pinned("module", (_one("pre"), _one("post", "raise")), call="ok"),
    _pinned("module", (_one("exception", "raise"),), call="raise"),
    _pinned("module", (_one("around"),), call="interrupt"),
    _pinned("module", (_one("around", "teardown_raise"), _one("exception")), call="interrupt"),
    _pinned("operation", (_one("event"),)),
    _pinned("operation", (_one("pre", "interrupt", once=True),)),
    _pinned("operation", (_one("around"),), call="interrupt", lifecycle="isolate"),
    _pinned("every_module", (_one("pre", "raise"), _one("post")), lifecycle="remove_during"),
    _pinned("every_module", (_one("around"),), call="interrupt", lifecycle="trace"),
    *(
        _pinned(point, (_one("around"), _one("pre", "raise"), _one("exception", "recover")))
        for point in ("module", "every_module")
    ),
)


@pytest.mark.parametrize("scenario", _ONCE_BROKEN)
def test_crossings_that_once_broke_hold_on_torch(scenario: Scenario) -> None:
    _check(scenario)


@settings(settings.get_profile(PROFILE))
@given(scenarios(points=("module",), lifecycles=TORCH_LIFECYCLES))
def test_crossings_hold_on_modules(scenario: Scenario) -> None:
    _check(scenario)


@settings(settings.get_profile(PROFILE))
@given(scenarios(points=("operation",), lifecycles=TORCH_LIFECYCLES))
def test_crossings_hold_on_operation_points(scenario: Scenario) -> None:
    _check(scenario)


@settings(settings.get_profile(PROFILE))
@given(scenarios(points=("every_module",), lifecycles=TORCH_LIFECYCLES))
def test_crossings_hold_on_every_module(scenario: Scenario) -> None:
    _check(scenario)
