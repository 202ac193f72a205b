"""hookbus installed the way a user installs it, each time into a fresh virtual environment.

* a wheel built from the checkout, core only: every part of the core runs, the pytest plugin
  loads through its ``pytest11`` entry point, ``py.typed`` is installed, and ``hookbus.torch``
  says how to get PyTorch;
* the same wheel with the ``torch`` extra (``torch==2.13.0`` on the same pip line): the
  adapter runs, and the extra brought numpy;
* an editable install (``pip install -e``, as the README says): ``mypy --strict`` and
  ``pyright`` on a user program in another folder find hookbus and hookbus.torch and their
  types, and ``import hookbus`` works from the checkout's parent folder, even one that holds
  a folder named ``hookbus`` (setuptools' import-hook finder failed both).

The wheel is built once per session, with the hatchling installed here (the ``dev`` extra);
the environments install from the package index through pip's cache. Slow (a minute or two,
most of it unpacking torch), so marked ``install``: CI runs them on Python 3.11.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
import venv
from pathlib import Path
from typing import Iterator, List

import pytest

ROOT = Path(__file__).resolve().parent.parent
PIP_WHEEL = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
TORCH = "torch==2.13.0"  # the CPU build on the project's machines; any other downloads CUDA

pytestmark = [pytest.mark.install, pytest.mark.timeout(900)]


class Env:
    """A fresh virtual environment, and the commands run in it."""

    def __init__(self, path: Path) -> None:
        venv.create(path, with_pip=True)
        self.path = path
        self.python = str(path / "bin" / "python")

    def pip_install(self, *requirements: str) -> None:
        # One pip line, so that torch's pin and the extra are resolved together.
        self.run([self.python, "-m", "pip", "install", "-q", *requirements], timeout=600)

    def run(self, command: List[str], cwd: Path = ROOT, timeout: float = 300) -> str:
        done = subprocess.run(
            command,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**_clean_environment(), "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
            check=False,
        )
        assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def python_code(self, code: str, cwd: Path) -> str:
        return self.run([self.python, "-c", textwrap.dedent(code)], cwd=cwd)


def _clean_environment() -> dict[str, str]:
    """This process's environment without what points at the checkout or this venv."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "MYPYPATH", "PYTHONHOME"}
    return {key: value for key, value in os.environ.items() if key not in drop}


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of the checkout, built once (the way `pip wheel .` builds it)."""
    if importlib.util.find_spec("hatchling") is None:
        pytest.skip('building the wheel needs hatchling (pip install -e ".[dev]")')
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [*PIP_WHEEL, "--wheel-dir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (built,) = out.glob("hookbus-*.whl")
    return built


# Each environment is deleted after its tests: one with torch takes about 1 GB, and pytest
# keeps the temporary folders of its last three runs. Not in CI (CI=true), whose machine
# goes away after the run: deleting two torch installs took 165 s on a busy dev machine.


def _delete(env: Env) -> None:
    if not os.environ.get("CI"):
        shutil.rmtree(env.path, ignore_errors=True)


@pytest.fixture(scope="module")
def core_env(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Iterator[Env]:
    env = Env(tmp_path_factory.mktemp("core") / "venv")
    try:
        env.pip_install(str(wheel), "pytest")  # pytest: to load the plugin as a user's run does
        yield env
    finally:
        _delete(env)


@pytest.fixture(scope="module")
def torch_env(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Iterator[Env]:
    env = Env(tmp_path_factory.mktemp("torch") / "venv")
    try:
        env.pip_install(TORCH, f"{wheel}[torch]")
        yield env
    finally:
        _delete(env)


@pytest.fixture(scope="module")
def editable_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    env = Env(tmp_path_factory.mktemp("editable") / "venv")
    try:
        env.pip_install(TORCH, "-e", f"{ROOT}[torch]")
        yield env
    finally:
        _delete(env)


# --- core only, from the wheel -------------------------------------------------------

CORE_SMOKE = """
import asyncio, sys
import hookbus
from hookbus import training

bus = hookbus.EventBus()
seen = []
bus.on("order.*", lambda order: seen.append(("pattern", order)))
bus.on("order.placed", lambda order: seen.append(("high", order)), priority="HIGH")
bus.emit("order.placed", 1)
assert seen == [("high", 1), ("pattern", 1)], seen
assert bus.collect("formats") == []

@bus.event
def user_created(user: str) -> None: ...
try:
    user_created.emit(1, 2)
except TypeError:
    pass
else:
    raise AssertionError("a declared event took the wrong arguments")

@bus.hookable("convert")
def convert(amount, rate=1.0):
    return amount * rate
with bus.pre("convert", lambda ctx: setattr(ctx, "kwargs", {"rate": 2.0})):
    with bus.post("convert", lambda ctx: setattr(ctx, "result", ctx.result + 1)):
        assert convert(10) == 21.0
bus.exception("convert", lambda ctx: ctx.recover(0.0))
assert convert("x", rate="y") == 0.0

with bus.scope():
    handle = bus.on("tick", print)
assert not handle.active

class Logger:
    @hookbus.listens(training.AFTER_TRAIN_ITER)
    def log(self, runner, **rest):
        seen.append("iter")
group = bus.subscribe(Logger())
bus.emit(training.AFTER_TRAIN_ITER, None, batch_idx=0, data_batch=[], outputs={})
group.remove()

async def heard(x):
    seen.append(("async", x))
bus.on("async", heard)
asyncio.run(bus.emit_async("async", 2))

bus.errors = "collect"
bus.on("fail", lambda: 1 / 0)
try:
    bus.emit("fail")
except hookbus.HookError as error:
    assert isinstance(error.exceptions[0], ZeroDivisionError)
assert "torch" not in sys.modules
print("core ok", hookbus.__file__)
"""

PLUGIN_TEST = """
import hookbus

def test_recorder(bus_recorder, event_bus, default_bus):
    hookbus.emit("order.placed", 7)
    bus_recorder.assert_emitted_with("order.placed", 7)
"""


def test_the_wheel_holds_the_package_and_its_metadata_only(wheel: Path) -> None:
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "hookbus/py.typed" in names
    assert "hookbus/torch/__init__.py" in names
    assert {name.split("/")[0] for name in names} == {"hookbus", "hookbus-0.1.0.dist-info"}


def test_core_wheel_runs_every_part_of_the_core(core_env: Env, tmp_path: Path) -> None:
    printed = core_env.python_code(CORE_SMOKE, cwd=tmp_path)
    assert "core ok" in printed
    assert str(core_env.path) in printed, "imported from somewhere else than the install"


def test_core_wheel_installs_py_typed_and_the_pytest_entry_point(
    core_env: Env, tmp_path: Path
) -> None:
    printed = core_env.python_code(
        """
        import importlib.metadata, pathlib, hookbus
        print(pathlib.Path(hookbus.__file__).with_name("py.typed").is_file())
        points = importlib.metadata.entry_points(group="pytest11")
        print([(p.name, p.value) for p in points if p.dist.name == "hookbus"])
        """,
        cwd=tmp_path,
    )
    assert printed.split("\n")[:2] == ["True", "[('hookbus', 'hookbus.pytest_plugin')]"]
    (tmp_path / "test_user.py").write_text(PLUGIN_TEST, encoding="utf-8")
    ran = core_env.run([core_env.python, "-m", "pytest", "-q", "-p", "no:cacheprovider"], tmp_path)
    assert "1 passed" in ran


def test_core_wheel_says_how_to_install_torch(core_env: Env, tmp_path: Path) -> None:
    printed = core_env.python_code(
        """
        try:
            import hookbus.torch
        except ImportError as error:
            print(error)
        """,
        cwd=tmp_path,
    )
    assert "needs PyTorch" in printed
    assert 'pip install "hookbus[torch]"' not in printed, "hookbus is not on the package index"
    assert "[torch]" in printed


# --- with the torch extra, from the wheel --------------------------------------------

TORCH_SMOKE = """
import torch
from torch import nn
import hookbus, hookbus.torch, numpy

model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
x = torch.randn(3, 4, requires_grad=True)
with hookbus.torch.capture(model, nn.Linear) as cache:
    y = model(x)
assert torch.equal(cache["2"].output, y)
bus = hookbus.EventBus()
net = hookbus.torch.attach(model, bus)
with bus.post("2", lambda ctx: setattr(ctx, "result", ctx.result * 2)):
    assert torch.allclose(model(x), 2 * y)
grads = []
with net.grad("0", lambda ctx: grads.append(ctx.result)):
    model(x).sum().backward()
assert grads and grads[0].shape == (3, 8)
net.detach()
assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
with hookbus.torch.stats(model, nn.Linear) as st:
    model(x)
assert st["0"].count == 3
print("torch ok", hookbus.__file__, torch.__version__)
"""


@pytest.mark.torch
def test_torch_extra_installs_torch_and_numpy_and_the_adapter_runs(
    torch_env: Env, tmp_path: Path
) -> None:
    printed = torch_env.python_code(TORCH_SMOKE, cwd=tmp_path)
    assert "torch ok" in printed
    assert str(torch_env.path) in printed
    extras = torch_env.python_code(
        "import importlib.metadata as m; print(m.metadata('hookbus').get_all('Provides-Extra'))",
        cwd=tmp_path,
    )
    assert "'torch'" in extras


# --- editable, as the README installs it ---------------------------------------------

# A user's program: every line type-checks, but for the one marked, which only a checker
# that sees hookbus's types can report.
USER_PROGRAM = """
import hookbus
import hookbus.torch
import torch
from torch import nn

bus = hookbus.EventBus()


@bus.hookable("convert")
def convert(amount: float, rate: float = 1.0) -> float:
    return amount * rate


value: float = convert(2.0, rate=3.0)
wrong: str = convert(2.0)  # error: the decorator kept convert's signature
model = nn.Sequential(nn.Linear(2, 2))
with hookbus.torch.capture(model, nn.Linear) as cache:
    model(torch.ones(1, 2))
out: torch.Tensor = cache["0"].output
handle: hookbus.Handle = bus.on("tick", print)
"""


def _checked_lines(output: str, pattern: str) -> List[int]:
    return sorted({int(line) for line in re.findall(pattern, output)})


def _user_program(folder: Path) -> Path:
    folder.mkdir()
    program = folder / "app.py"
    program.write_text(USER_PROGRAM, encoding="utf-8")
    return program


def _marked_line() -> int:
    return next(n for n, line in enumerate(USER_PROGRAM.split("\n"), 1) if "# error" in line)


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip(f"{name} comes with the dev extra")
    return found


@pytest.mark.torch
def test_mypy_strict_sees_an_editable_install(editable_env: Env, tmp_path: Path) -> None:
    program = _user_program(tmp_path / "user")
    mypy = [_tool("mypy"), "--strict", "--no-incremental"]
    done = subprocess.run(
        [*mypy, "--python-executable", editable_env.python, program.name],
        cwd=program.parent,
        capture_output=True,
        text=True,
        timeout=600,
        env=_clean_environment(),
        check=False,
    )
    output = done.stdout + done.stderr
    assert "import-not-found" not in output, output
    assert "import-untyped" not in output, output
    assert _checked_lines(output, r"app\.py:(\d+): error") == [_marked_line()], output


@pytest.mark.torch
def test_pyright_sees_an_editable_install(editable_env: Env, tmp_path: Path) -> None:
    program = _user_program(tmp_path / "user")
    done = subprocess.run(
        [_tool("pyright"), "--pythonpath", editable_env.python, program.name],
        cwd=program.parent,
        capture_output=True,
        text=True,
        timeout=600,
        env=_clean_environment(),
        check=False,
    )
    output = done.stdout + done.stderr
    assert "reportMissingImports" not in output, output
    assert "reportMissingModuleSource" not in output, output
    assert _checked_lines(output, r"app\.py:(\d+):\d+ - error") == [_marked_line()], output


@pytest.mark.torch
def test_an_editable_install_imports_from_the_checkouts_parent_folder(
    editable_env: Env, tmp_path: Path
) -> None:
    code = "import hookbus; hookbus.on; print(hookbus.__file__)"
    printed = editable_env.python_code(code, cwd=ROOT.parent)
    assert Path(printed.strip()) == ROOT / "hookbus" / "__init__.py"
    # A checkout cloned into a folder named hookbus: that folder, seen from its parent, is
    # a namespace package candidate, and the editable install's package must win.
    (tmp_path / "hookbus").symlink_to(ROOT, target_is_directory=True)
    printed = editable_env.python_code(code, cwd=tmp_path)
    assert Path(printed.strip()).resolve() == ROOT / "hookbus" / "__init__.py"
