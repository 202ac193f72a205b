"""mmengine's bridge: one ``Hook``, and wrappers on the runner's entry points for errors.

mmengine's hook stages have hookbus's event names and arguments, so each is relayed to the
event of the same name. mmengine has no stage for a run that raises: ``train``, ``val`` and
``test`` of this runner are wrapped (per instance) to send ``on_exception``. mmengine counts an
epoch as done after ``after_train_epoch``; the runner's ``epoch`` holds the epoch that ran
until the next begins, as under the other trainers.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Dict, Generator, List, Optional, Tuple

import hookbus
from hookbus import training

from ._framework import require
from ._relay import TEST_PREFIXES, VAL_PREFIXES, Relay, as_outputs, with_common_names
from ._wrappers import MethodWrappers

_hook_class: Optional[type] = None

_ITER_EVENTS = {
    training.BEFORE_TRAIN_ITER,
    training.AFTER_TRAIN_ITER,
    training.BEFORE_VAL_ITER,
    training.AFTER_VAL_ITER,
    training.BEFORE_TEST_ITER,
    training.AFTER_TEST_ITER,
}
_EPOCH_STARTS = {training.BEFORE_RUN, training.BEFORE_TRAIN, training.BEFORE_TRAIN_EPOCH}
_METRIC_PREFIXES = {
    training.AFTER_VAL_EPOCH: VAL_PREFIXES,
    training.AFTER_TEST_EPOCH: TEST_PREFIXES,
}


def accepts(trainer: Any) -> bool:
    """Whether ``trainer`` is an mmengine ``Runner``."""
    runner_module = sys.modules.get("mmengine.runner")
    return runner_module is not None and isinstance(trainer, runner_module.Runner)


def _hook_type() -> type:
    """The bridge's ``Hook`` class, made once."""
    global _hook_class
    if _hook_class is None:
        hooks = require("mmengine", "mmengine.hooks")

        class HookbusHook(hooks.Hook):  # type: ignore[misc,name-defined]
            """Relays mmengine's hook stages to the same-named hookbus events."""

            def __init__(self, bridge: MMEngineBridge) -> None:
                self.bridge = bridge

        def relayer(event: str) -> Callable[..., None]:
            def relay(self: Any, runner: Any, **keywords: Any) -> None:
                self.bridge.emit(event, runner, **keywords)

            relay.__name__ = event
            return relay

        # mmengine's Runner.call_hook passes everything but the runner by keyword.
        for event in training.EVENTS:
            if event != training.ON_EXCEPTION:  # mmengine has no such stage
                setattr(HookbusHook, event, relayer(event))
        _hook_class = HookbusHook
    return _hook_class


def relays_on(trainer: Any) -> List[Relay]:
    """The relays of the bridges connected to ``trainer``."""
    if _hook_class is None:
        return []
    ours: List[Any] = [hook for hook in trainer.hooks if isinstance(hook, _hook_class)]
    return [hook.bridge.relay for hook in ours]


def install(trainer: Any, bus: hookbus.EventBus) -> Tuple[Relay, Callable[[], None]]:
    """Connect ``bus`` to ``trainer``; return the relay, and what disconnects it."""
    require("mmengine", "mmengine.hooks")  # each time: a partial install says what is missing
    bridge = MMEngineBridge(trainer, bus)
    return bridge.relay, bridge.disconnect


class MMEngineBridge:
    """One bus connected to one mmengine ``Runner``."""

    def __init__(self, runner: Any, bus: hookbus.EventBus) -> None:
        self.runner = runner
        self.relay = Relay("mmengine", bus, runner, self._stop, self._log)
        self.hook = _hook_type()(self)
        self.runs = 0  # train / val / test calls under way
        # Priority NORMAL among mmengine's own hooks; the bus orders its hooks itself.
        runner.register_hook(self.hook)
        self.wrapped = MethodWrappers(runner)
        for entry in ("train", "val", "test"):
            self.wrapped.wrap(entry, self._wrap_run)

    def disconnect(self) -> None:
        self.relay.active = False
        if self.hook in self.runner.hooks:
            self.runner.hooks.remove(self.hook)
        self.wrapped.restore()

    def _stop(self) -> None:
        self.runner.train_loop.stop_training = True

    def _log(self, name: str, value: float) -> None:
        self.runner.visualizer.add_scalars({name: value}, step=self.runner.iter)

    def emit(self, event: str, runner: Any, **keywords: Any) -> None:
        view = self.relay.runner
        view.model = runner.model
        # mmengine's runner.iter counts the finished iterations, as TrainerRunner.iter does.
        view.iter = runner.iter
        if event in _EPOCH_STARTS:
            view.epoch = runner.epoch  # mmengine adds one after after_train_epoch: held here
        if event in _ITER_EVENTS:
            keywords.setdefault("data_batch", None)
            if event.startswith("after_"):
                keywords["outputs"] = _outputs(keywords.get("outputs"))
        prefixes = _METRIC_PREFIXES.get(event)
        if prefixes is not None:
            keywords["metrics"] = with_common_names(keywords.get("metrics"), prefixes)
        self.relay.emit(event, {"runner": runner}, **keywords)

    @contextlib.contextmanager
    def _run(self) -> Generator[None, None, None]:
        self.runs += 1
        try:
            yield
        except BaseException as error:
            if self.runs == 1 and self.relay.active:
                native = {"runner": self.runner}
                self.relay.emit_exception(native, error)
            raise
        finally:
            self.runs -= 1

    def _wrap_run(self, run: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._run():
                return run(*args, **kwargs)

        return wrapper


def _outputs(value: Any) -> Optional[Dict[str, Any]]:
    """A step's outputs: the training step's dict of losses, or the predictions of the others."""
    if value is None or isinstance(value, dict):
        return as_outputs(value)
    return {"predictions": value}
