"""Every script in examples/ runs, checks its own results, and exits 0.

Each runs in a fresh interpreter, as a user would run it, so that an example
can't lean on state another test left behind.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = [
    pytest.mark.torch,
    pytest.mark.skipif(not HAS_TORCH, reason="the example needs PyTorch (pip install torch)"),
]

CORE_EXAMPLES = ["observer.py", "pre_post_exception.py", "async_events.py", "method_hooks.py"]
TORCH_EXAMPLES = ["training_loop.py", "feature_extraction.py", "gradient_capture.py"]
# Trains under each trainer that is installed (the dev extra installs all three).
TORCH_EXAMPLES.append("trainers.py")
# On a tiny random Hugging Face GPT-2: needs transformers too (the test extra has it).
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
needs_transformers = [
    *needs_torch,
    pytest.mark.skipif(
        not HAS_TRANSFORMERS, reason="the example needs transformers (pip install transformers)"
    ),
]
GPT2_EXAMPLES = ["interpretability.py"]
# Run by torchrun on 2 CPU processes (gloo), as their docstrings say.
DISTRIBUTED_EXAMPLES = ["distributed_stats.py"]
TOUR = ["tour.py"]  # the README's demo: run and checked by tests/test_demo.py


def all_examples() -> List[str]:
    return sorted(path.name for path in EXAMPLES.glob("*.py"))


def run(name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=EXAMPLES.parent,
    )


def test_every_example_is_run_by_a_test() -> None:
    assert all_examples() == sorted(
        CORE_EXAMPLES + TORCH_EXAMPLES + GPT2_EXAMPLES + DISTRIBUTED_EXAMPLES + TOUR
    )


@pytest.mark.parametrize("name", all_examples())
def test_each_example_says_what_it_shows(name: str) -> None:
    docstring = ast.get_docstring(ast.parse((EXAMPLES / name).read_text()))
    assert docstring, f"{name} has no module docstring"
    assert "Shows:" in docstring
    assert f"python examples/{name}" in docstring


@pytest.mark.parametrize("name", CORE_EXAMPLES)
def test_core_example_runs(name: str) -> None:
    result = run(name)
    assert result.returncode == 0, result.stderr
    assert "example: ok" in result.stdout


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=needs_torch) for n in TORCH_EXAMPLES]
    + [pytest.param(n, marks=needs_transformers) for n in GPT2_EXAMPLES],
)
def test_torch_example_runs(name: str) -> None:
    result = run(name)
    assert result.returncode == 0, result.stderr
    assert "example: ok" in result.stdout


@pytest.mark.torch
@pytest.mark.skipif(
    not (HAS_TORCH and HAS_TRANSFORMERS), reason="the example needs PyTorch and transformers"
)
def test_the_trainers_example_skips_a_half_installed_trainer_saying_what_is_missing(
    tmp_path: Path,
) -> None:
    # transformers without accelerate (the hf extra installs both): an accelerate that fails
    # to import, first on the path.
    (tmp_path / "accelerate").mkdir()
    (tmp_path / "accelerate" / "__init__.py").write_text('raise ImportError("not here")\n')
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "trainers.py"), "hand-written", "hf"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=EXAMPLES.parent,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    skipped = 'hf: skipped, accelerate is not installed (pip install torch==2.13.0 -e ".[hf]")'
    assert skipped in result.stdout
    assert "example: ok" in result.stdout


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=needs_torch) for n in DISTRIBUTED_EXAMPLES]
)
def test_distributed_example_runs_under_torchrun(name: str) -> None:
    # torchrun is `python -m torch.distributed.run`; --standalone picks a free port.
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=EXAMPLES.parent,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert "example: ok" in result.stdout


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=needs_torch) for n in DISTRIBUTED_EXAMPLES]
)
def test_distributed_example_without_torchrun_says_how_to_run_it(name: str) -> None:
    result = run(name)
    assert result.returncode == 0, result.stderr
    assert f"torchrun --nproc_per_node=2 examples/{name}" in result.stdout
