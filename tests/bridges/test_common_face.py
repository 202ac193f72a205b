"""What every bridge gives a hook alike: each event at its moment, with its data and counters.

Each test runs the same short training under each trainer (see bridge_helpers) and checks what
one hook class saw, so that a hook written once sees the same run under all three.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from bridge_helpers import (
    BATCH,
    ITERS,
    KINDS,
    MAKERS,
    VAL_ITERS,
    Recorder,
    StopAt,
    grammar,
    recorded_run,
    seen_in_order,
    torch,
)

import hookbus
from hookbus import training

pytestmark = pytest.mark.torch


@pytest.mark.parametrize("kind", KINDS)
def test_each_event_comes_at_its_moment_around_the_model_steps(kind: str, tmp_path: Path) -> None:
    # A "before" event comes before its step's forward, an "after" event after it: a hook
    # that sets up in before_val_epoch (an EMA swap) is in place for batch 0.
    _, run = recorded_run(kind, tmp_path)
    expected = grammar(2, validation_inside_epoch=kind == "lightning", forwards=True)
    assert seen_in_order(run.timeline) == expected


@pytest.mark.parametrize("kind", KINDS)
def test_every_step_event_carries_its_batch(kind: str, tmp_path: Path) -> None:
    recorder, _ = recorded_run(kind, tmp_path)
    steps = [seen for seen in recorder.seen if seen.event.endswith("_iter")]
    assert len(steps) == 2 * 2 * (ITERS + VAL_ITERS)
    assert all(seen.rows == BATCH for seen in steps), [(s.event, s.rows) for s in steps]


@pytest.mark.parametrize("kind", KINDS)
def test_every_training_step_reports_its_loss_as_a_number(kind: str, tmp_path: Path) -> None:
    recorder, _ = recorded_run(kind, tmp_path)
    losses = [seen.loss for seen in recorder.at("after_train_iter")]
    assert len(losses) == 2 * ITERS
    assert all(isinstance(loss, float) and loss > 0 for loss in losses), losses


@pytest.mark.parametrize("kind", KINDS)
def test_the_counters_mean_the_same_under_every_trainer(kind: str, tmp_path: Path) -> None:
    recorder, _run = recorded_run(kind, tmp_path)
    # (epoch, iterations finished before this one, batch of the epoch), from 0
    assert [(s.epoch, s.iter, s.batch_idx) for s in recorder.at("after_train_iter")] == [
        (epoch, epoch * ITERS + batch, batch) for epoch in range(2) for batch in range(ITERS)
    ]
    # The validation after an epoch names that epoch, and the iterations run so far.
    for event in ("before_val", "before_val_epoch", "after_val_epoch", "after_val"):
        assert [(s.epoch, s.iter) for s in recorder.at(event)] == [(0, ITERS), (1, 2 * ITERS)]
    assert [s.batch_idx for s in recorder.at("after_val_iter")] == list(range(VAL_ITERS)) * 2
    for event in ("after_train_epoch", "after_train", "after_run"):
        assert recorder.at(event)[-1].epoch == 1
    assert [(s.epoch, s.iter) for s in recorder.at("after_run")] == [(1, 2 * ITERS)]
    assert len(recorder.runners) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_validation_metrics_have_a_common_name_beside_their_own(kind: str, tmp_path: Path) -> None:
    recorder, _ = recorded_run(kind, tmp_path)
    own = {"hf": "eval_loss", "lightning": "val_loss", "mmengine": "val_loss"}[kind]
    for seen in recorder.at("after_val_epoch"):
        assert seen.metrics is not None
        assert isinstance(seen.metrics["loss"], float)
        assert seen.metrics["loss"] == seen.metrics[own]


class Patience:
    """A patience-based stopper reading metrics["loss"], with no per-trainer setting."""

    hook_events = training.EVENTS

    def __init__(self) -> None:
        self.best = float("inf")
        self.losses: List[float] = []

    def after_val_epoch(self, runner: Any, *, metrics: Dict[str, Any]) -> None:
        self.losses.append(metrics["loss"])
        self.best = min(self.best, metrics["loss"])


@pytest.mark.parametrize("kind", KINDS)
def test_a_stopper_reads_the_validation_loss_by_one_name(kind: str, tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    stopper = Patience()
    bus.subscribe(stopper)
    recorded_run(kind, tmp_path, bus)
    assert len(stopper.losses) == 2
    assert all(isinstance(loss, float) for loss in stopper.losses)


@pytest.mark.parametrize("kind", KINDS)
def test_a_failing_run_ends_with_on_exception_carrying_its_error(
    kind: str, tmp_path: Path
) -> None:
    bus = hookbus.EventBus()
    run = MAKERS[kind](tmp_path, bus, epochs=1, fail_at=2)
    recorder = Recorder(bus, run.timeline)
    with pytest.raises(FloatingPointError, match="loss diverged") as raised:
        run.train()
    assert recorder.events[-1] == "on_exception"
    assert recorder.seen[-1].exception is raised.value  # the very error, re-raised unchanged
    assert recorder.events.count("after_train_iter") == 2
    assert "after_train" not in recorder.events
    assert "after_run" not in recorder.events


class FailingCleanup:
    """An emergency-checkpoint hook that fails itself: the disk is full."""

    hook_events = training.EVENTS

    def on_exception(self, runner: Any, *, exception: BaseException) -> None:
        raise OSError("disk full")


@pytest.mark.parametrize("kind", KINDS)
def test_an_on_exception_hook_that_raises_does_not_replace_the_runs_error(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The caller's `except FloatingPointError` (retry with a lower learning rate) must still
    # catch the run's own error: the hook's failure is noted on it and logged, not raised.
    bus = hookbus.EventBus()
    run = MAKERS[kind](tmp_path, bus, epochs=1, fail_at=2)
    recorder = Recorder(bus, run.timeline)  # first: the failing hook ends the dispatch
    bus.subscribe(FailingCleanup())
    with (
        caplog.at_level("ERROR", logger="hookbus"),
        pytest.raises(FloatingPointError, match="loss diverged") as raised,
    ):
        run.train()
    assert recorder.seen[-1].exception is raised.value
    notes = getattr(raised.value, "__notes__", [])
    assert any("on_exception" in note and "OSError" in note for note in notes), notes
    logged = [r.exc_info[1] for r in caplog.records if r.name == "hookbus" and r.exc_info]
    assert [type(error) for error in logged] == [OSError]


class Broken:
    hook_events = training.EVENTS

    def after_train_iter(self, runner: Any, **_: Any) -> None:
        raise ValueError("broken hook")


@pytest.mark.parametrize("kind", KINDS)
def test_a_hook_error_under_the_raise_policy_ends_the_run_through_on_exception(
    kind: str, tmp_path: Path
) -> None:
    bus = hookbus.EventBus()
    bus.subscribe(Broken())
    run = MAKERS[kind](tmp_path, bus, epochs=1)
    recorder = Recorder(bus, run.timeline)
    with pytest.raises(ValueError, match="broken hook"):
        run.train()
    assert recorder.events[-1] == "on_exception"
    assert isinstance(recorder.seen[-1].exception, ValueError)


@pytest.mark.parametrize("kind", KINDS)
def test_priorities_and_the_log_policy_hold_under(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bus = hookbus.EventBus(errors="log")
    order: List[str] = []

    class Low:
        hook_events = training.EVENTS
        hook_priority = "LOW"

        def after_train_iter(self, runner: Any, **_: Any) -> None:
            order.append("low")

    class High(Low):
        hook_priority = "HIGH"

        def after_train_iter(self, runner: Any, **_: Any) -> None:
            order.append("high")

    for hook in (Low(), Broken(), High()):  # registration order doesn't matter
        bus.subscribe(hook)
    with caplog.at_level("ERROR", logger="hookbus"):
        MAKERS[kind](tmp_path, bus, epochs=1).train()
    assert order == ["high", "low"] * ITERS  # every step ran, in priority order
    errors = [r for r in caplog.records if r.name == "hookbus" and r.exc_info]
    assert [type(r.exc_info[1]) for r in errors if r.exc_info] == [ValueError] * ITERS


class SwapWeights:
    """An EMA-style hook: other weights in place for validation, the trained ones back after."""

    hook_events = training.EVENTS

    def __init__(self) -> None:
        self.saved: List[torch.Tensor] = []

    def before_val_epoch(self, runner: Any) -> None:
        parameters = list(runner.model.parameters())
        self.saved = [parameter.detach().clone() for parameter in parameters]
        with torch.no_grad():
            for parameter in parameters:
                parameter.zero_()

    def after_val_epoch(self, runner: Any, *, metrics: Dict[str, Any]) -> None:
        with torch.no_grad():
            for parameter, saved in zip(runner.model.parameters(), self.saved):
                parameter.copy_(saved)


@pytest.mark.parametrize("kind", KINDS)
def test_weights_swapped_at_before_val_epoch_serve_every_validation_batch(
    kind: str, tmp_path: Path
) -> None:
    bus = hookbus.EventBus()
    bus.subscribe(SwapWeights())
    run = MAKERS[kind](tmp_path, bus)
    looks: List[Tuple[bool, bool]] = []  # (training, swapped) at each forward

    def look(module: torch.nn.Module, args: Any) -> None:
        if not getattr(run.trainer, "sanity_checking", False):  # Lightning's sends nothing
            swapped = all(bool((p == 0).all()) for p in module.parameters())
            looks.append((module.training, swapped))

    run.model.register_forward_pre_hook(look)
    run.train()
    assert [swapped for training_, swapped in looks if not training_] == [True] * 2 * VAL_ITERS
    assert not any(swapped for training_, swapped in looks if training_)


@pytest.mark.parametrize("kind", KINDS)
def test_a_hook_stops_the_run_the_same_way_under(kind: str, tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    bus.subscribe(StopAt(steps=3))
    recorder, run = recorded_run(kind, tmp_path, bus, epochs=3)
    assert run.connection.runner.stop_requested
    # mmengine's epoch-based loop reads the request at the end of the epoch.
    assert recorder.events.count("after_train_iter") == (ITERS if kind == "mmengine" else 3)
    assert recorder.events.count("after_train_epoch") == 1
    assert recorder.events[-2:] == ["after_train", "after_run"]


LOGGED_AT = (
    "before_train",
    "after_train_iter",
    "after_train_epoch",
    "after_val_iter",
    "after_val_epoch",
    "after_val",
    "after_train",
    "after_run",
)  # every event where a metric makes sense


def log_at(event: str) -> Any:
    def log(runner: Any, **_: Any) -> None:
        runner.log(f"hookbus/{event}", torch.tensor(float(runner.iter)))

    return log


def _logged_names(kind: str, run: Any) -> List[str]:
    """The names the trainer's own logging received, in order."""
    if kind == "hf":
        return [name for entry in run.trainer.state.log_history for name in entry]
    if kind == "lightning":
        return [name for entry in run.trainer.logger.logged for name in entry]
    (scalars,) = Path(run.trainer.log_dir).rglob("scalars.json")
    lines = [json.loads(line) for line in scalars.read_text().splitlines()]
    return [name for line in lines for name in line]


@pytest.mark.parametrize("kind", KINDS)
def test_runner_log_reaches_the_trainers_logging_at_every_event(kind: str, tmp_path: Path) -> None:
    bus = hookbus.EventBus()  # the raise policy: a refused log would end the run
    for event in LOGGED_AT:
        bus.on(event, log_at(event))
    options: Dict[str, Any] = {}
    if kind == "lightning":
        options["logger"] = _recording_logger()
    run = MAKERS[kind](tmp_path, bus, **options)
    run.train()
    logged = _logged_names(kind, run)
    for event in LOGGED_AT:
        assert f"hookbus/{event}" in logged, event
    per_iter = 2 * ITERS
    assert logged.count("hookbus/after_train_iter") == per_iter


def _recording_logger() -> Any:
    from lightning.pytorch.loggers import Logger

    class RecordingLogger(Logger):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.logged: List[Dict[str, float]] = []

        @property
        def name(self) -> str:
            return "recording"

        @property
        def version(self) -> int:
            return 0

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            pass

        def log_metrics(self, metrics: Dict[str, float], step: Any = None) -> None:
            self.logged.append(dict(metrics))

    return RecordingLogger()
