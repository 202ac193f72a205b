"""hookbus.training: the conventional training-loop names, and hook classes using them."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Set, Tuple, get_args

import pytest

import hookbus
from hookbus import training

CONSTANTS = {name: getattr(training, name) for name in training.__all__ if name.isupper()}
NAMES = {name: value for name, value in CONSTANTS.items() if isinstance(value, str)}


def test_each_constant_is_its_own_lower_case_name() -> None:
    # So that a hook class's method names are the event names (hook_events = EVENTS).
    assert NAMES
    for constant, value in NAMES.items():
        assert value == constant.lower()
        assert value.isidentifier()


def test_events_lists_every_name_once() -> None:
    assert len(set(training.EVENTS)) == len(training.EVENTS)
    assert set(training.EVENTS) == set(NAMES.values())


def test_the_literal_type_matches_the_names() -> None:
    assert set(get_args(training.TrainingEvent)) == set(training.EVENTS)


@pytest.mark.parametrize(
    ("stage", "events"),
    [
        ("train", training.TRAIN_EVENTS),
        ("val", training.VAL_EVENTS),
        ("test", training.TEST_EVENTS),
    ],
)
def test_each_stage_nests_before_and_after_in_run_order(
    stage: str, events: Tuple[str, ...]
) -> None:
    assert events == (
        f"before_{stage}",
        f"before_{stage}_epoch",
        f"before_{stage}_iter",
        f"after_{stage}_iter",
        f"after_{stage}_epoch",
        f"after_{stage}",
    )


def test_the_run_starts_and_ends_the_order_with_on_exception_apart() -> None:
    assert training.EVENTS[0] == "before_run"
    assert training.EVENTS[-2:] == ("after_run", "on_exception")
    assert "on_exception" not in training.TRAIN_EVENTS + training.VAL_EVENTS


def test_importing_the_names_imports_no_framework() -> None:
    code = "import sys, hookbus.training; print(sorted({'torch', 'mmengine'} & set(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


class Loop:
    """A minimal loop that emits the conventional events, as a user's loop would."""

    def __init__(self, bus: hookbus.EventBus, fail_at: int = -1) -> None:
        self.bus, self.fail_at, self.iter = bus, fail_at, 0

    def run(self, epochs: int, batches: int) -> None:
        emit = self.bus.emit
        emit(training.BEFORE_RUN, self)
        try:
            emit(training.BEFORE_TRAIN, self)
            for _ in range(epochs):
                emit(training.BEFORE_TRAIN_EPOCH, self)
                for batch_idx in range(batches):
                    emit(training.BEFORE_TRAIN_ITER, self, batch_idx=batch_idx, data_batch=None)
                    if self.iter == self.fail_at:
                        raise RuntimeError("step failed")
                    outputs = {"loss": 1.0 / (self.iter + 1)}
                    emit(
                        training.AFTER_TRAIN_ITER,
                        self,
                        batch_idx=batch_idx,
                        data_batch=None,
                        outputs=outputs,
                    )
                    self.iter += 1
                emit(training.AFTER_TRAIN_EPOCH, self)
            emit(training.AFTER_TRAIN, self)
        except Exception as error:
            emit(training.ON_EXCEPTION, self, exception=error)
            raise
        emit(training.AFTER_RUN, self)


class EveryEvent:
    """Defines a method for every conventional event, with the documented arguments."""

    hook_events = training.EVENTS

    def __init__(self) -> None:
        self.seen: List[str] = []


for _event in training.EVENTS:

    def _method(self: EveryEvent, runner: Any, _event: str = _event, **kwargs: Any) -> None:
        self.seen.append(_event)

    setattr(EveryEvent, _event, _method)


def test_a_hook_class_declaring_events_hears_the_loop_in_order() -> None:
    bus = hookbus.EventBus()
    hooks = EveryEvent()
    bus.subscribe(hooks)
    Loop(bus).run(epochs=2, batches=2)
    epoch = [
        "before_train_epoch",
        *["before_train_iter", "after_train_iter"] * 2,
        "after_train_epoch",
    ]
    assert hooks.seen == ["before_run", "before_train", *epoch * 2, "after_train", "after_run"]


def test_on_exception_replaces_the_end_of_the_run() -> None:
    bus = hookbus.EventBus()
    hooks = EveryEvent()
    bus.subscribe(hooks)
    with pytest.raises(RuntimeError, match="step failed"):
        Loop(bus, fail_at=1).run(epochs=1, batches=3)
    assert hooks.seen[-3:] == ["after_train_iter", "before_train_iter", "on_exception"]
    assert "after_run" not in hooks.seen


def test_mmengine_priorities_order_hooks_of_one_event() -> None:
    order: List[str] = []

    def hook_class(name: str, priority: str) -> Any:
        def after_train_iter(self: Any, runner: Any, **kwargs: Any) -> None:
            order.append(name)

        return type(
            name,
            (),
            {
                "hook_events": training.EVENTS,
                "hook_priority": priority,
                "after_train_iter": after_train_iter,
            },
        )()

    bus = hookbus.EventBus()
    for name, priority in [
        ("Checkpoint", "VERY_LOW"),
        ("Logger", "BELOW_NORMAL"),
        ("Timer", "NORMAL"),
        ("Sampler", "VERY_HIGH"),
    ]:
        bus.subscribe(hook_class(name, priority))
    Loop(bus).run(epochs=1, batches=1)
    assert order == ["Sampler", "Timer", "Logger", "Checkpoint"]


# --- the documented calling convention, followed everywhere ---------------------------

ROOT = Path(__file__).resolve().parent.parent


def _documented_keywords() -> Dict[str, Set[str]]:
    """Each event's keywords, from its constant's docstring: ``(runner, *, a, b)``."""
    tree = ast.parse(Path(training.__file__).read_text(encoding="utf-8"))
    keywords: Dict[str, Set[str]] = {}
    for statement, following in zip(tree.body, tree.body[1:]):
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
            continue
        if not (isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)):
            continue
        found = re.search(r"``\(runner(?:, \*, ([\w, ]+))?\)``", str(following.value.value))
        if found:
            names = found.group(1)
            keywords[statement.target.id] = set(names.split(", ")) if names else set()
    return keywords


def _sources() -> Iterator[Tuple[str, str]]:
    """(where, Python source) of the README's blocks, the docs' examples and examples/."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for index, block in enumerate(re.findall(r"```python\n(.*?)```", readme, flags=re.S)):
        yield f"README.md block {index}", block
    for page in sorted((ROOT / "docs").glob("*.md")):
        lines = re.findall(r"^(?:>>>|\.\.\.) ?(.*)$", page.read_text(encoding="utf-8"), re.M)
        yield str(page.relative_to(ROOT)), "\n".join(lines)
    for path in sorted((ROOT / "examples").glob("*.py")):
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")


def test_every_emit_of_a_training_event_passes_the_documented_keywords() -> None:
    documented = _documented_keywords()
    assert documented["AFTER_TRAIN_ITER"] == {"batch_idx", "data_batch", "outputs"}
    assert set(documented) == set(NAMES)
    checked, wrong = 0, []
    for where, source in _sources():
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue  # a docs page whose examples don't parse as one module
        for call in ast.walk(tree):
            if not (isinstance(call, ast.Call) and call.args):
                continue
            function = call.func
            name = function.attr if isinstance(function, ast.Attribute) else ""
            name = function.id if isinstance(function, ast.Name) else name
            event = call.args[0]
            if not (name.startswith("emit") and isinstance(event, ast.Attribute)):
                continue
            if not (isinstance(event.value, ast.Name) and event.value.id == "training"):
                continue
            checked += 1
            passed = {keyword.arg for keyword in call.keywords}
            if len(call.args) != 2 or passed != documented[event.attr]:
                expected = ", ".join(sorted(documented[event.attr])) or "nothing"
                wrong.append(
                    f"{where}:{call.lineno}: {event.attr} takes the runner and {expected}; "
                    f"got {len(call.args) - 1} positional, keywords {sorted(map(str, passed))}"
                )
    assert checked >= 20, f"only {checked} emits of training events found"
    assert not wrong, "\n".join(wrong)
