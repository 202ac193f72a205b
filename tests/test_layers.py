"""The layers of hookbus: no module imports from a layer above its own, and no cycle.

:data:`LAYERS` is the one map, bottom first. A module may import only from a
layer strictly below its own, in every form Python has: at module level, under
``if TYPE_CHECKING:``, inside a function, ``from . import x``, ``import hookbus.x``.
A module no layer names fails the test too, so a new module gets its place here.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hookbus"

# Bottom first. Each layer is a list of module paths under hookbus/ (globs allowed):
# a module imports only from layers below its own.
LAYERS: List[List[str]] = [
    ["_names.py", "_kinds.py", "_mutex.py"],  # names, glob patterns; the table; the bus lock
    ["_spec.py"],  # event specs: binders, by-name callers
    ["_context.py"],  # the CallContext of one call
    ["_handle.py"],  # one registration, groups of them, and the store they know
    ["_errors.py", "_options.py", "_open_scopes.py"],
    ["_trace.py"],  # traces and their records
    ["_declarations.py"],  # declared events and what a bus knows of names
    ["_plan.py"],  # plans, and the point seam
    ["_live_points.py"],  # the live points of a registry, by name
    # The map of every loop, and what both variants share; around hooks as generators.
    ["_dispatch.py", "_arounds.py"],
    ["_async_dispatch.py", "_sync_dispatch.py"],  # the loops: the source, and the generated
    ["_compiled_call.py"],  # a hook point's call, compiled to straight-line code per plan
    ["_registry.py"],  # the store: hooks, points, declarations, the lock
    ["_scope.py", "_hookpoint.py", "_event.py"],
    ["_subscribe.py", "_pause.py", "_without.py"],  # hook classes; pauses; a bus less some hooks
    ["_bus.py"],  # the EventBus facade
    ["adapter.py", "__init__.py"],  # the seam, and the package's public names
    ["_recorder.py", "training.py", "demo.py"],
    ["pytest_plugin.py"],
    # The trainer bridges: what every bridge shares, then one module per trainer, then
    # the connection that picks one.
    ["bridges/_framework.py", "bridges/_runner.py", "bridges/_wrappers.py"],
    ["bridges/_relay.py"],
    ["bridges/_hf.py", "bridges/_lightning.py", "bridges/_mmengine.py"],
    ["bridges/_connection.py"],
    ["bridges/__init__.py"],
    # The torch adapter, on hookbus and hookbus.adapter alone. Where warnings point, outside
    # hookbus; then foundations with no hooks: tensors in nested outputs, wrapper names,
    # exact statistics.
    ["torch/_user_line.py", "torch/_module_kinds.py"],
    ["torch/_tree.py", "torch/_unwrap.py", "torch/_moments.py"],
    # Mechanisms, each alone: which module call a frame runs, an owner's native hooks in a
    # module's hook dicts, selection, output-gradient hooks, statistics feeds, collectives,
    # torch.nn.functional's functions swapped for dispatchers.
    [
        "torch/_call_frames.py",
        "torch/_function_swap.py",
        "torch/_call_starts.py",
        "torch/_native_hooks.py",
        "torch/_selection.py",
        "torch/_grad.py",
        "torch/_feed.py",
        "torch/_distributed.py",
        "torch/_replaced_modules.py",
    ],
    # The forward swap (skips, patches, recompiles), and what a capture recorded.
    ["torch/_forward_swap.py", "torch/_cache.py"],
    ["torch/_script_refusal.py"],  # it removes a copy's stand-ins
    # Hook points: a module's, and the operations inside a module's forward.
    ["torch/_point.py", "torch/_operations.py"],
    # The names vocabulary: the table format and the views of a value; one table per
    # layout (those built on Llama's above it); finding a model's table, and reading and
    # writing a value through points; the values the forward does not hold; a name's
    # hook point; the point source of one model's names.
    ["torch/_architecture.py", "torch/_head_views.py"],
    [
        "torch/_tables/__init__.py",
        "torch/_tables/gpt2.py",
        "torch/_tables/gpt_neox.py",
        "torch/_tables/llama.py",
        "torch/_tables/opt.py",
    ],
    ["torch/_tables/gemma2.py", "torch/_tables/phi3.py", "torch/_tables/qwen3.py"],
    ["torch/_table_detection.py", "torch/_recipes.py"],
    ["torch/_attention_pattern.py", "torch/_norm_scale.py", "torch/_value_point.py"],
    ["torch/_vocabulary.py"],
    ["torch/_attach.py"],  # attaching a model: its modules (and names) become hook points
    # The features.
    [
        "torch/_every_module.py",
        "torch/_capture.py",
        "torch/_patching.py",
        "torch/_generation.py",
        "torch/_stats.py",
    ],
    ["torch/__init__.py"],
]

# Modules outside the package that may not be imported by the core.
ADAPTERS = ("torch/*", "bridges/*")


def module_path(module: str) -> Optional[str]:
    """``hookbus._bus`` -> ``_bus.py``; ``hookbus.torch`` -> ``torch/__init__.py``; else None."""
    parts = module.split(".")
    if parts[0] != "hookbus":
        return None
    rest = parts[1:]
    if not rest:
        return "__init__.py"
    candidate = PACKAGE.joinpath(*rest)
    if candidate.is_dir():
        return "/".join([*rest, "__init__.py"])
    return "/".join(rest) + ".py"


def layer_of(path: str) -> Optional[int]:
    for index, layer in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(path, pattern) for pattern in layer):
            return index
    return None


def _package_of(path: str) -> str:
    """The dotted package a module path is in: ``torch/_point.py`` -> ``hookbus.torch``."""
    parts = ["hookbus", *path.split("/")[:-1]]
    return ".".join(parts)


def imports_of(source: str, path: str) -> List[Tuple[int, str]]:
    """``(line, module path)`` of every hookbus module that ``source`` imports, in any form.

    ``from . import x`` and ``from hookbus import x`` count as importing ``x`` when
    ``x`` is a module, and the package ``__init__`` otherwise.
    """
    package = _package_of(path)
    found: List[Tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = module_path(alias.name)
                if target is not None:
                    found.append((node.lineno, target))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            target = module_path(module)
            if target is None:
                continue
            for alias in node.names:
                sub = module_path(f"{module}.{alias.name}")
                if sub is not None and (PACKAGE / sub).exists():
                    found.append((node.lineno, sub))  # from . import _x: the module _x
                else:
                    found.append((node.lineno, target))
    return [(line, target) for line, target in found if target != path]


def _modules() -> Dict[str, str]:
    return {
        path.relative_to(PACKAGE).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def upward_imports(modules: Dict[str, str]) -> List[str]:
    """``a.py:line -> b.py`` for each import of a module at or above the importer's layer."""
    found = []
    for path, source in modules.items():
        own = layer_of(path)
        for line, target in imports_of(source, path):
            theirs = layer_of(target)
            if own is None or theirs is None:
                continue  # reported by test_every_module_has_a_layer
            if theirs >= own:
                found.append(f"hookbus/{path}:{line} -> hookbus/{target}")
    return found


def cycles(modules: Dict[str, str], skip: Tuple[str, ...] = ()) -> List[List[str]]:
    """Every import cycle among ``modules`` (each as the list of its modules), skipping
    modules that match a pattern of ``skip``."""

    def skipped(path: str) -> bool:
        return any(fnmatch.fnmatchcase(path, pattern) for pattern in skip)

    graph: Dict[str, Set[str]] = {
        path: {t for _, t in imports_of(source, path) if t in modules and not skipped(t)}
        for path, source in modules.items()
        if not skipped(path)
    }
    found: List[List[str]] = []
    state: Dict[str, int] = {}  # 1: on the stack, 2: done
    stack: List[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                found.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


# --- the package itself --------------------------------------------------------------


def test_every_module_has_a_layer() -> None:
    unplaced = [path for path in _modules() if layer_of(path) is None]
    assert not unplaced, f"give these modules a layer in LAYERS: {unplaced}"


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    upward = upward_imports(_modules())
    assert not upward, "imports that run upward (move the code, or add a protocol):\n" + (
        "\n".join(upward)
    )


def test_no_core_module_imports_an_adapter() -> None:
    offenders = [
        f"hookbus/{path}:{line} -> hookbus/{target}"
        for path, source in _modules().items()
        if not any(fnmatch.fnmatchcase(path, pattern) for pattern in ADAPTERS)
        for line, target in imports_of(source, path)
        if any(fnmatch.fnmatchcase(target, pattern) for pattern in ADAPTERS)
    ]
    assert not offenders, offenders


def test_the_package_has_no_import_cycle() -> None:
    found = cycles(_modules())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


# --- the checker finds what it must ----------------------------------------------------

_LOW, _HIGH = "_names.py", "_bus.py"


@pytest.mark.parametrize(
    "source",
    [
        "from ._bus import EventBus",
        "from hookbus._bus import EventBus",
        "import hookbus._bus",
        "import hookbus._bus as bus_module",
        "from . import _bus",
        "from hookbus import _bus",
        "from . import EventBus",  # the package __init__, above every core module
        "import hookbus",
        "if TYPE_CHECKING:\n    from ._bus import EventBus",
        "def lazy():\n    from ._bus import EventBus",
        "class A:\n    def m(self):\n        import hookbus._bus",
        "try:\n    from ._bus import EventBus\nexcept ImportError:\n    pass",
    ],
)
def test_the_checker_finds_each_kind_of_upward_import(source: str) -> None:
    assert upward_imports({_LOW: source}), source


@pytest.mark.parametrize(
    "source",
    [
        "from ._names import check_name",
        "from .._names import check_name",  # as hookbus/torch would write it: not this module
        "import os",
        "from typing import TYPE_CHECKING",
        "from torch import nn",
    ],
)
def test_the_checker_allows_what_runs_down_or_outside(source: str) -> None:
    assert not upward_imports({_HIGH: source})


def test_the_checker_refuses_an_import_within_one_layer() -> None:
    assert upward_imports({"_errors.py": "from ._options import parse_options"})


def test_the_checker_allows_the_torch_layer_to_import_itself_and_the_seam() -> None:
    source = "from ._tree import Path\nfrom ..adapter import CallContext\nfrom .. import bus"
    assert not upward_imports({"torch/_point.py": source})
    assert upward_imports({"adapter.py": "from .torch import attach"})


def test_the_cycle_check_finds_a_cycle() -> None:
    modules = {
        "_a.py": "from ._b import x",
        "_b.py": "def f():\n    from ._c import y",
        "_c.py": "if TYPE_CHECKING:\n    from ._a import z",
    }
    assert cycles(modules) == [["_a.py", "_b.py", "_c.py", "_a.py"]]
    assert cycles({"_a.py": "from ._b import x", "_b.py": ""}) == []
