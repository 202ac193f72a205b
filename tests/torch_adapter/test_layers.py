"""The torch adapter's layers: every import in ``hookbus/torch`` points down, none makes a circle.

Every import form counts: at module level, under ``if TYPE_CHECKING:``, and inside a
function or method. A module may import only from a layer below its own, so the
map below says which module stands on which; a new module needs a place in it.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

TORCH = Path(__file__).resolve().parent.parent.parent / "hookbus" / "torch"
PACKAGE = "hookbus.torch"

LAYERS: List[List[str]] = [
    # Where warnings point, outside hookbus.
    ["_user_line"],
    # Foundations, no hooks: tensors in nested outputs, wrapper names, exact statistics.
    ["_tree", "_unwrap", "_moments"],
    # Mechanisms, each alone: which module call a frame runs, an owner's native hooks in a
    # module's hook dicts, selection, output-gradient hooks, statistics feeds, collectives.
    ["_call_frames", "_native_hooks", "_selection", "_grad", "_feed", "_distributed"],
    # The forward swap (skips, patches, recompiles), and what a capture recorded.
    ["_forward_swap", "_cache"],
    # The TorchScript refusal (it removes a copy's stand-ins).
    ["_script_refusal"],
    # Hook points: a module's, and the operations inside a module's forward.
    ["_point", "_operations"],
    # Attaching a model: its modules become hook points of a bus.
    ["_attach"],
    # The features.
    ["_every_module", "_capture", "_patching", "_generation", "_stats"],
    # The public package.
    ["__init__"],
]
"""The modules of ``hookbus/torch`` (file stems), bottom layer first."""


def _absolute(node: ast.ImportFrom) -> str:
    """The absolute module an ``from ... import`` names, seen from a module of the package."""
    if not node.level:
        return node.module or ""
    base = PACKAGE.split(".")[: len(PACKAGE.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _stem(module: str, stems: Set[str]) -> str:
    """``_point`` for ``hookbus.torch._point``; ``__init__`` for the package itself."""
    rest = module[len(PACKAGE) + 1 :].split(".")[0] if module != PACKAGE else ""
    return rest if rest in stems else "__init__"


def torch_imports(source: str, stems: Set[str]) -> List[Tuple[int, str]]:
    """``(line, stem)`` of every import of a module of ``hookbus.torch`` in ``source``.

    Every form: ``import hookbus.torch._x``, ``from hookbus.torch._x import y``, ``from
    ._x import y``, ``from . import _x`` and ``from hookbus.torch import y`` (the package
    itself unless ``y`` is a module), wherever the statement stands.
    """
    found: List[Tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    found.append((node.lineno, _stem(alias.name, stems)))
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node)
            if module == PACKAGE:
                found += [(node.lineno, _stem(f"{PACKAGE}.{a.name}", stems)) for a in node.names]
            elif module.startswith(PACKAGE + "."):
                found.append((node.lineno, _stem(module, stems)))
            elif module == "hookbus" and any(a.name == "torch" for a in node.names):
                found.append((node.lineno, "__init__"))
    return found


def _stems() -> Set[str]:
    return {path.stem for path in TORCH.glob("*.py")}


def import_graph() -> Dict[str, Dict[str, int]]:
    """Module stem -> {imported stem: first line}, over every import form."""
    stems = _stems()
    graph: Dict[str, Dict[str, int]] = {}
    for stem in sorted(stems):
        source = (TORCH / f"{stem}.py").read_text(encoding="utf-8")
        imported: Dict[str, int] = {}
        for line, target in torch_imports(source, stems):
            if target != stem:
                imported.setdefault(target, line)
        graph[stem] = imported
    return graph


def upward_imports(graph: Dict[str, Dict[str, int]], layers: List[List[str]]) -> List[str]:
    """Every import of a module from the same layer or one above, as a readable line."""
    layer_of = {stem: index for index, layer in enumerate(layers) for stem in layer}
    return [
        f"hookbus/torch/{stem}.py:{line} imports {target} (layer {layer_of[target]}) from "
        f"layer {layer_of[stem]}"
        for stem, imported in sorted(graph.items())
        for target, line in sorted(imported.items())
        if layer_of[target] >= layer_of[stem]
    ]


def cycles(graph: Dict[str, Dict[str, int]]) -> List[List[str]]:
    """One path for each import circle found (a depth-first walk; empty when there is none)."""
    found: List[List[str]] = []
    state: Dict[str, str] = {}  # "open" while on the path, "done" after

    def visit(stem: str, path: List[str]) -> None:
        state[stem] = "open"
        for target in sorted(graph.get(stem, {})):
            if state.get(target) == "open":
                found.append([*path[path.index(target) :], stem, target])
            elif target not in state:
                visit(target, [*path, stem])
        state[stem] = "done"

    for stem in sorted(graph):
        if stem not in state:
            visit(stem, [])
    return found


# --- the adapter as it is -------------------------------------------------------------


def test_every_module_of_the_adapter_has_one_place_in_the_layers() -> None:
    placed = [stem for layer in LAYERS for stem in layer]
    assert len(placed) == len(set(placed)), "a module placed twice"
    assert set(placed) == _stems(), (
        f"not placed: {sorted(_stems() - set(placed))}; "
        f"no such module: {sorted(set(placed) - _stems())}"
    )


def test_every_import_inside_the_adapter_points_down() -> None:
    upward = upward_imports(import_graph(), LAYERS)
    assert not upward, "imports that do not point down:\n" + "\n".join(upward)


def test_no_import_circle_inside_the_adapter() -> None:
    circles = cycles(import_graph())
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


# --- the checks themselves find what they look for -----------------------------------

STEMS = {"_point", "_patching", "_tree", "__init__"}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from ._patching import ForwardSwap", "_patching"),
        ("from . import _patching", "_patching"),
        ("from . import patch", "__init__"),
        ("from .. import torch", "__init__"),
        ("from ..torch._patching import patch", "_patching"),
        ("import hookbus.torch._patching", "_patching"),
        ("import hookbus.torch", "__init__"),
        ("from hookbus.torch._patching import patch", "_patching"),
        ("from hookbus.torch import _patching", "_patching"),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._patching import X",
            "_patching",
        ),
        ("def f():\n    from ._patching import ForwardSwap", "_patching"),
        ("class C:\n    def m(self):\n        from ._patching import X", "_patching"),
        ("try:\n    from ._patching import X\nexcept ImportError:\n    pass", "_patching"),
    ],
)
def test_the_walk_finds_every_import_form(source: str, expected: str) -> None:
    assert [stem for _, stem in torch_imports(source, STEMS)] == [expected]


@pytest.mark.parametrize(
    "source",
    [
        "from ..adapter import CallContext",
        "from .. import default_bus",
        "import hookbus",
        "import torch",
        "from torch import nn",
        "import hookbus.torchvision_like",
    ],
)
def test_the_walk_ignores_what_is_not_the_adapter(source: str) -> None:
    assert torch_imports(source, STEMS) == []


def test_an_import_from_the_same_layer_or_above_is_refused() -> None:
    layers = [["_tree"], ["_point", "_patching"], ["__init__"]]
    graph = {
        "_tree": {},
        "_point": {"_tree": 1, "_patching": 7},  # beside it
        "_patching": {"__init__": 3},  # above it
        "__init__": {"_point": 1, "_patching": 2},
    }
    assert upward_imports(graph, layers) == [
        "hookbus/torch/_patching.py:3 imports __init__ (layer 2) from layer 1",
        "hookbus/torch/_point.py:7 imports _patching (layer 1) from layer 1",
    ]


def test_the_circle_search_finds_a_circle_and_nothing_in_a_stack() -> None:
    stack = {"a": {"b": 1}, "b": {"c": 1}, "c": {}}
    assert cycles(stack) == []
    circle = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}}
    assert cycles(circle) == [["a", "b", "c", "a"]]
