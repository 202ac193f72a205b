"""A tour of every part of hookbus, each part's code shown above what it printed.

Run it from a checkout, with hookbus installed (see the README):

    python -m hookbus.demo      # the README's demo command; or: python examples/tour.py

Shows: events; declared events; hook points with pre, post and exception hooks; handles,
scopes, pauses and traces; hook classes; the training-loop events; async; the error
policies; the pytest plugin; and (when torch is installed) the torch adapter. Each part has
a numbered title naming the docs page that explains it, then the few lines of code that
ran (the body of its function below), then what they printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import inspect
import logging
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import hookbus
from hookbus import CallContext, EventBus, training


def _say(text: str) -> None:
    """Print an indented line, wrapped to fit a terminal."""
    print(textwrap.fill(text, 92, initial_indent="  ", subsequent_indent="    "))


def _say_error(what: str, error: BaseException) -> None:
    """Print what failed and the error's message."""
    _say(f"{what}: {_short_paths(str(error))}")


def _short_paths(text: str) -> str:
    """A message with its paths cut to the file name: (/home/.../tour.py:12) -> (tour.py:12)."""
    return re.sub(r"\(\S*[/\\]", "(", text)


# (title, docs page, run, code shown): the tour, in order.
PARTS: List[Tuple[str, str, Callable[[], None], str]] = []


def part(
    title: str, docs: str, show: Optional[str] = None
) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Add a part to the tour: a numbered title naming its docs page, its code, its output.

    The code shown is the function's body, or ``show`` when the body is only plumbing.
    """

    def add(run: Callable[[], None]) -> Callable[[], None]:
        PARTS.append((title, docs, run, show if show is not None else _body(run)))
        return run

    return add


def _body(function: Callable[[], None]) -> str:
    """The source of a function's body, without its docstring, dedented."""
    lines = inspect.getsource(function).splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("def ")) + 1
    body = textwrap.dedent("\n".join(lines[start:]))
    if body.startswith('"""'):
        body = body[body.index('"""', 3) + 3 :].lstrip("\n")
    return body


@part("Events: bus.on, bus.emit, bus.collect", "Concepts")
def events() -> None:
    """Observers of a named event, in priority order, with once and patterns."""
    bus = EventBus("shop")

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


@part("Declared events: @bus.event, checked at registration and emit", "Declared events")
def declared_events() -> None:
    """A stub's signature as an event's spec: hooks and emissions that don't fit fail early."""
    bus = EventBus("accounts")

    @bus.event
    def user_created(user: str, *, admin: bool = False) -> None:
        """Emitted after a user row is committed."""

    def welcome(user: str, admin: bool = False) -> None:
        print(f"  welcome {user} (admin={admin})")

    def on_created(user: str, role: str) -> None:  # needs role=, which the event never passes
        pass

    print("declared:", user_created)
    user_created.on(welcome)
    user_created.emit("ada", admin=True)
    try:
        user_created.on(on_created)  # type: ignore[arg-type]  # mypy sees it too
    except TypeError as error:
        _say_error("registering on_created fails at once", error)
    try:
        bus.emit("user_created", "bob", "extra")
    except TypeError as error:
        _say_error("emit with the wrong arguments fails", error)
    bus.on("user_craeted", welcome)  # a typo: this hook would never run
    try:
        bus.check_pending()
    except hookbus.UnknownNameError as error:
        _say_error("check_pending() finds it", error)


@part("Hook points: @bus.hookable with pre, post and exception hooks", "Concepts")
def hook_points() -> None:
    """Pre, post and exception hooks around a decorated function."""
    bus = EventBus("rates")

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


@part("Handles, scopes, pauses and traces", "Concepts")
def handles_and_scopes() -> None:
    """Handles remove one hook; scopes remove everything registered inside them."""
    bus = EventBus("clock")
    handle = bus.on("tick", lambda: print("  tick heard"))
    print("handle:", handle)
    bus.emit("tick")
    handle.remove()
    handle.remove()  # idempotent
    print("after remove (twice), active =", handle.active)
    bus.emit("tick")
    with bus.scope():
        bus.on("tick", lambda: print("  tick heard inside the scope"))
        bus.on("tock", lambda: None)
        bus.emit("tick")
    print("after the scope, hooks left:", bus.hooks())
    bus.on("tick", lambda: print("  tick heard"))
    with bus.paused("ti*"):
        bus.emit("tick")
        print("tick emitted while 'ti*' is paused: no hook ran")
    with bus.trace() as trace:
        bus.emit("tick")
        bus.emit("tick")
    print("a trace of two emissions:", [(r.name, r.kind) for r in trace.records])


@part("Hook classes: bus.subscribe and @hookbus.listens", "Hook classes and training loops")
def hook_classes() -> None:
    """Hook methods of an object, registered and removed as one group."""
    bus = EventBus("shop")

    @bus.hookable("checkout")
    def checkout(cart: List[str]) -> int:
        return len(cart)

    class Analytics:
        hook_priority = "LOW"  # the default for its methods (mmengine's names work)

        @hookbus.listens("order.placed")
        def count(self, order_id: int) -> None:
            print(f"  Analytics.count: order {order_id} (priority LOW)")

        @hookbus.listens("order.placed", priority="HIGH")
        def validate(self, order_id: int) -> None:
            print(f"  Analytics.validate: order {order_id} (priority HIGH, its own)")

        @hookbus.listens("checkout", kind="post")
        def items(self, ctx: CallContext) -> None:
            print(f"  Analytics.items: a post hook, checkout returned {ctx.result}")

    analytics = Analytics()
    subscription = bus.subscribe(analytics, weak=True)
    print("subscribe(analytics, weak=True) ->", subscription)
    bus.emit("order.placed", 7)
    checkout(["tea", "cups"])
    del analytics
    gc.collect()
    print("once the object is collected (weak=True):", subscription, "hooks:", bus.hooks())


@part("Training-loop events: hookbus.training", "Hook classes and training loops")
def training_events() -> None:
    """mmengine's event names and calling convention, emitted by a loop of your own."""
    bus = EventBus("trainer")

    class LossLogger:
        hook_events = training.EVENTS  # each method named like an event handles it

        def after_train_iter(self, runner: Any, *, batch_idx: int, **rest: Any) -> None:
            print(f"  iter {batch_idx}: loss {rest['outputs']['loss']:.2f}")

        def after_train_epoch(self, runner: Any) -> None:
            print(f"  epoch {runner['epoch']} done")

    bus.subscribe(LossLogger())
    runner: Dict[str, Any] = {"epoch": 0}
    print(f"{len(training.EVENTS)} names in training.EVENTS; a two-iteration epoch:")
    bus.emit(training.BEFORE_TRAIN_EPOCH, runner)
    for batch_idx, loss in enumerate([0.9, 0.6]):
        data_batch = {"x": [batch_idx]}
        bus.emit(training.BEFORE_TRAIN_ITER, runner, batch_idx=batch_idx, data_batch=data_batch)
        bus.emit(
            training.AFTER_TRAIN_ITER,
            runner,
            batch_idx=batch_idx,
            data_batch=data_batch,
            outputs={"loss": loss},
        )
    bus.emit(training.AFTER_TRAIN_EPOCH, runner)


@part("Async: emit_async and async hook points", "Guarantees, Async")
def async_hooks() -> None:
    """Sync and async hooks mixed, each awaited in turn; sync emit refuses async hooks."""
    bus = EventBus("web")

    async def send_mail(user: str) -> None:
        await asyncio.sleep(0)
        print(f"  async hook: mailed {user}")

    def validate(user: str) -> None:
        print(f"  sync hook: validated {user}")

    bus.on("signup", validate, priority="HIGH")
    bus.on("signup", send_mail)

    @bus.hookable("fetch")
    async def fetch(url: str) -> str:
        await asyncio.sleep(0)
        return f"<page {url}>"

    async def cache(ctx: CallContext) -> None:
        await asyncio.sleep(0)
        print(f"  async post hook: caching {ctx.result}")

    bus.post("fetch", cache)

    async def main() -> None:
        print("await bus.emit_async('signup', 'ada'):")
        await bus.emit_async("signup", "ada")
        print("await fetch('/home') ->", await fetch("/home"))

    asyncio.run(main())
    try:
        bus.emit("signup", "bob")
    except TypeError as error:
        _say_error("a plain bus.emit('signup', ...) refuses, before any hook runs", error)


@part("Error policies: raise, collect, log", "Guarantees, Error policies")
def error_policies() -> None:
    """What the bus does when a hook raises, per policy."""
    bus = EventBus("shop")

    def reserve_stock(order_id: int) -> None:
        raise KeyError(f"no stock for order {order_id}")

    def send_receipt(order_id: int) -> None:
        print(f"  the next hook ran for order {order_id}")

    bus.on("order.placed", reserve_stock)
    bus.on("order.placed", send_receipt)
    print('errors="raise" (the default): the error propagates at once, with a note:')
    try:
        bus.emit("order.placed", 1)
    except KeyError as error:
        for note in getattr(error, "__notes__", []):  # the hook, and where it is defined
            _say(_short_paths(note))
    bus.errors = "collect"
    print('errors="collect": every hook runs, then one HookError (an ExceptionGroup):')
    try:
        bus.emit("order.placed", 2)
    except hookbus.HookError as group:
        print(f"  HookError({group.message!r}, {group.exceptions!r})")
    bus.errors = "log"
    print('errors="log": the error goes to the "hookbus" logger, and dispatch goes on:')
    with _log_printed("hookbus"):
        bus.emit("order.placed", 3)


@contextlib.contextmanager
def _log_printed(name: str) -> Iterator[None]:
    """Print a logger's records as one line each (no traceback), to keep the tour short."""
    handler = _PrintHandler()
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = True


class _PrintHandler(logging.Handler):
    """Shows a log record as one line (no traceback), to keep the tour short."""

    def emit(self, record: logging.LogRecord) -> None:
        _say(f"{record.levelname}:{record.name}: {record.getMessage()}")


_TEST_FILE = """
import hookbus

def place_order(order_id):
    hookbus.emit("order.placed", order_id, total="9.99 EUR")

def test_order_is_announced(bus_recorder):
    place_order(7)
    bus_recorder.assert_emitted_with("order.placed", 7, total="9.99 EUR")

def test_hooks_do_not_leak(default_bus, event_bus):
    hookbus.on("order.placed", print)  # on the default bus: removed after the test
    event_bus.on("order.placed", print)  # a fresh bus for each test
    assert len(default_bus.hooks("order.placed")) == 1

def test_a_readable_failure(bus_recorder):
    place_order(8)
    bus_recorder.assert_emitted("order.shiped")  # a typo, on purpose
"""


@part("Testing: the pytest plugin's fixtures", "Testing with pytest", show=_TEST_FILE)
def pytest_plugin() -> None:
    """The fixtures event_bus, default_bus and bus_recorder, in a test file run by pytest."""
    print("installing hookbus gives every test the fixtures event_bus, default_bus and")
    print("bus_recorder; the code above is a test file using them, test_shop.py.")
    if importlib.util.find_spec("pytest") is None:
        print("pytest is not installed (pip install pytest, to run the file); here are the")
        print("same checks, with the BusRecorder behind bus_recorder:")
        _record_without_pytest()
        return
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "test_shop.py")
        with open(path, "w", encoding="utf-8") as file:
            file.write(_TEST_FILE)
        # -p hookbus.pytest_plugin loads the plugin even where hookbus is not installed
        # (a source checkout); -p no:hookbus avoids loading it twice where it is.
        command = [sys.executable, "-m", "pytest", path, "-q", "--tb=line", "-p", "no:hookbus"]
        command += ["-p", "hookbus.pytest_plugin", "-p", "no:cacheprovider", "--no-header"]
        result = subprocess.run(
            command,
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "PYTHONPATH": _package_root()},
        )
    print("python -m pytest -q test_shop.py: two pass, and the failure reads")
    lines = result.stdout.splitlines()
    # The first line naming the error: "E   AssertionError: ..." or "file:line: ...".
    failure = next((line for line in lines if "AssertionError: " in line), "")
    _say(failure[failure.find("AssertionError: ") :])
    print("  " + next((line for line in lines if " passed" in line), result.stdout[-200:]))


def _record_without_pytest() -> None:
    from hookbus._recorder import BusRecorder  # hookbus.pytest_plugin.BusRecorder, without pytest

    def place_order(order_id: int) -> None:
        hookbus.emit("order.placed", order_id, total="9.99 EUR")

    with BusRecorder() as recorder:  # records hookbus.default_bus
        place_order(7)
        recorder.assert_emitted_with("order.placed", 7, total="9.99 EUR")
        print("  assert_emitted_with('order.placed', 7, total='9.99 EUR') passed")
        place_order(8)
        try:
            recorder.assert_emitted("order.shiped")
        except AssertionError as error:
            _say(f"AssertionError: {error}")


def _package_root() -> str:
    """The directory this hookbus is imported from, so the subprocess imports it too."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(hookbus.__file__)))
    path = os.environ.get("PYTHONPATH")
    return root + (os.pathsep + path if path else "")


def _torch_installed() -> bool:
    if importlib.util.find_spec("torch") is None:
        print("torch is not installed: pip install torch (or, in a checkout of hookbus,")
        print('pip install torch==2.13.0 -e ".[torch]") to see this part.')
        return False
    return True


@part("The PyTorch adapter: capture, steer, gradients", "PyTorch adapter")
def torch_adapter() -> None:
    """The same hooks on nn.Module, when torch is installed."""
    if not _torch_installed():
        return
    import torch

    import hookbus.torch

    net = _small_net()  # fc1 -> relu -> fc2 -> relu6, every weight 1.0
    x = torch.full((2, 2), 0.1)
    with hookbus.torch.capture(net, ["fc1", "relu", "fc2"], inputs=True) as cache:
        out = net(x)
    for name, record in cache.items():
        print(f"  {name:5} input {_row(record.args[0])} -> output {_row(record.output)}")
    fc1 = net.fc1(x)  # forward, step by step: the hooks saw the same tensors
    steps = {"fc1": fc1, "relu": torch.relu(fc1), "fc2": net.fc2(torch.relu(fc1))}
    same = all(torch.equal(cache[name].output, value) for name, value in steps.items())
    print(f"  captured == forward's own tensors: {same}; net(x) = {out[0].item():.1f}")

    bus = EventBus("demo-torch")
    with hookbus.torch.attach(net, bus) as attached:

        def halve(ctx: CallContext) -> None:
            ctx.result = ctx.result / 2

        with attached.post("fc2", halve):
            print(f"a post hook halving fc2's output: net(x) = {net(x)[0].item():.1f}")
        print(f"after the with block: net(x) = {net(x)[0].item():.1f}, hooks: {bus.hooks()}")

        grads: List[Any] = []
        with attached.grad("fc1", lambda ctx: grads.append(ctx.result)):
            net(x).sum().backward()
        print(f"gradient reaching fc1's output (row 0): {_row(grads[0])}")

    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor([3.0, 4.0], requires_grad=True)
    z = ((b - a) ** 2).mean()

    def double(ctx: CallContext) -> None:
        ctx.result = ctx.result * 2

    hookbus.torch.on_grad(z, double)
    z.backward()
    print(f"on_grad(z, double): a.grad = {_row(a.grad)}, b.grad = {_row(b.grad)}")
    print(f"native hooks left on the net: {_native_hooks(net)}")


def _small_net() -> Any:
    """The classic 2-layer hook tutorial net, every weight 1.0."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(2, 2)
            self.relu = nn.ReLU()
            self.fc2 = nn.Linear(2, 1)
            self.relu6 = nn.ReLU6()

        def forward(self, x: Any) -> Any:
            return self.relu6(self.fc2(self.relu(self.fc1(x))))

    net = Net()
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.fill_(1.0)
    return net


def _row(tensor: Any) -> List[float]:
    """The first row (or the values of a 1-d tensor), rounded for printing."""
    if tensor is None:
        return []
    row = tensor[0] if tensor.dim() > 1 else tensor
    return [round(value, 4) for value in row.tolist()]


def _native_hooks(net: Any) -> int:
    """torch's own hooks left on the modules: capture and attach leave none."""
    return sum(
        len(module._forward_hooks) + len(module._forward_pre_hooks) + len(module._backward_hooks)
        for module in net.modules()
    )


_INDENT = "    "


def main() -> None:
    """Run the tour: each part's title, its code, then what it printed."""
    print(f"hookbus {hookbus.__version__}: a tour of every part, each with its docs page")
    for number, (title, docs, run, code) in enumerate(PARTS, 1):
        print(f"\n== {number}. {title}  (docs: {docs})")
        print("-- code:")
        for line in code.strip("\n").splitlines():
            print(f"{_INDENT}{line}".rstrip())
        print("-- output:")
        sys.stdout.flush()
        run()


if __name__ == "__main__":
    main()
