"""connect() and the connection it returns: once per bus, and a clean disconnect."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest
from bridge_helpers import ITERS, KINDS, MAKERS, Recorder, nn

import hookbus
from hookbus import bridges

pytestmark = pytest.mark.torch


def _callbacks(run: Any) -> List[Any]:
    """The trainer's own list of callbacks (hooks, for mmengine)."""
    trainer = run.trainer
    if run.kind == "hf":
        return list(trainer.callback_handler.callbacks)
    if run.kind == "lightning":
        return list(trainer.callbacks)
    return list(trainer.hooks)


def _own_attributes(run: Any) -> Dict[str, Any]:
    return {name: value for name, value in vars(run.trainer).items() if callable(value)}


def test_connect_refuses_what_is_no_trainer_and_what_is_no_bus() -> None:
    with pytest.raises(TypeError, match=r"connect\(\) takes a transformers\.Trainer.*got Linear"):
        bridges.connect(nn.Linear(1, 1))
    with pytest.raises(TypeError, match=r"takes a hookbus\.EventBus or None as bus, got str"):
        bridges.connect(nn.Linear(1, 1), "bus")  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", KINDS)
def test_a_second_connection_of_the_same_bus_is_refused(kind: str, tmp_path: Path) -> None:
    bus = hookbus.EventBus("metrics")
    run = MAKERS[kind](tmp_path, bus, epochs=1)
    before = _callbacks(run)
    with pytest.raises(ValueError, match=r"bus 'metrics' is already connected to this \w+"):
        bridges.connect(run.trainer, bus)
    assert _callbacks(run) == before  # nothing half-added
    other = hookbus.EventBus()
    mine, theirs = Recorder(bus), Recorder(other)
    with bridges.connect(run.trainer, other):
        run.train()
    assert mine.events.count("after_train_iter") == ITERS  # once each, not twice
    assert theirs.events == mine.events


@pytest.mark.parametrize("kind", KINDS)
def test_disconnect_leaves_the_trainer_as_it_was(kind: str, tmp_path: Path) -> None:
    bare = MAKERS[kind](tmp_path / "bare", None)
    run = MAKERS[kind](tmp_path, hookbus.EventBus())
    assert run.connection.connected
    assert len(_callbacks(run)) == len(_callbacks(bare)) + 1
    run.connection.disconnect()
    run.connection.disconnect()  # idempotent
    assert not run.connection.connected
    assert [type(cb).__name__ for cb in _callbacks(run)] == [
        type(cb).__name__ for cb in _callbacks(bare)
    ]
    assert _own_attributes(run).keys() == _own_attributes(bare).keys()
    recorder = Recorder(run.connection.bus)
    run.train()
    assert recorder.events == []
    assert "disconnected" in repr(run.connection)


@pytest.mark.parametrize("kind", KINDS)
def test_a_with_block_connects_for_its_duration(kind: str, tmp_path: Path) -> None:
    run = MAKERS[kind](tmp_path, None, epochs=1)
    bus = hookbus.EventBus()
    recorder = Recorder(bus)
    with bridges.connect(run.trainer, bus) as connection:
        assert connection.runner.kind == kind
        assert connection.runner.trainer is run.trainer
        run.train()
    assert not connection.connected
    assert recorder.events[-1] == "after_run"
    connection = bridges.connect(run.trainer, bus)  # the same bus may connect again
    connection.disconnect()


def test_a_wrapper_another_put_on_top_stays_and_passes_calls_through(tmp_path: Path) -> None:
    run = MAKERS["hf"](tmp_path, hookbus.EventBus(), epochs=1)
    trainer = run.trainer
    calls: List[str] = []
    ours = trainer.train

    def theirs(*args: Any, **kwargs: Any) -> Any:
        calls.append("theirs")
        return ours(*args, **kwargs)

    trainer.train = theirs
    run.connection.disconnect()
    assert trainer.train is theirs  # not taken from under them
    assert "evaluate" not in vars(trainer)
    recorder = Recorder(run.connection.bus)
    trainer.train()
    assert calls == ["theirs"]
    assert recorder.events == []


def test_a_partial_install_names_the_missing_package_and_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = MAKERS["hf"](tmp_path, None)
    monkeypatch.setitem(sys.modules, "accelerate", None)  # what a missing package looks like
    with pytest.raises(ImportError) as raised:
        bridges.connect(run.trainer, hookbus.EventBus())
    message = str(raised.value)
    assert "needs accelerate, which is not installed" in message
    assert 'pip install "hookbus[hf]"' in message
    assert 'pip install torch==2.13.0 -e ".[hf]"' in message


def test_a_stop_asked_before_the_run_reaches_it_and_the_next_run_starts_unstopped(
    tmp_path: Path,
) -> None:
    bus = hookbus.EventBus()
    run = MAKERS["hf"](tmp_path, bus, epochs=1)
    recorder = Recorder(bus)
    run.connection.runner.stop()  # before any event: nothing to tell the trainer yet
    run.train()
    assert recorder.events.count("after_train_iter") == 1
    del recorder.seen[:]
    run.train()
    assert recorder.events.count("after_train_iter") == ITERS
    assert not run.connection.runner.stop_requested
