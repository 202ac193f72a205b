"""The adapters are built on the public seam: ``hookbus`` and ``hookbus.adapter`` only.

The torch adapter and the example adapter (examples/method_hooks.py) import nothing else.

A second adapter (flax, a web router) can then be written from what torch uses,
and the core's private modules can be renamed or merged without touching it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parent.parent
TORCH = ROOT / "hookbus" / "torch"


def _private(module: str) -> bool:
    """Whether ``module`` (absolute, dotted) is a private module of hookbus's core."""
    parts = module.split(".")
    return (
        len(parts) >= 2
        and parts[0] == "hookbus"
        and parts[1] != "torch"
        and parts[1].startswith("_")
        and not parts[1].startswith("__")
    )


def private_imports(source: str, package: str = "hookbus.torch") -> List[str]:
    """``line: text`` of every use of a private core module in ``source``.

    Imports of one (``package`` is the package the module is in, to resolve
    relative imports; ``from .. import _x`` counts too), and attribute access
    such as ``hookbus._bus.EventBus`` after ``import hookbus``.
    """
    found: List[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and _private(f"{node.value.id}.{node.attr}"):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
            else:
                base = []
            module = ".".join(base + ([node.module] if node.module else []))
            targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
        else:
            continue
        if any(_private(target) for target in targets):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_torch_adapter_imports_only_hookbus_and_hookbus_adapter() -> None:
    offenders = []
    modules = sorted(TORCH.rglob("*.py"))
    assert len(modules) > 5  # the walk found the adapter
    for path in modules:
        package = ".".join(path.relative_to(ROOT).parent.parts)  # hookbus.torch._tables
        for hit in private_imports(path.read_text(encoding="utf-8"), package):
            offenders.append(f"{path.relative_to(ROOT)}:{hit}")
    assert not offenders, (
        "hookbus/torch imports private core modules; import from hookbus or "
        "hookbus.adapter instead:\n" + "\n".join(offenders)
    )


@pytest.mark.parametrize(
    "source",
    [
        "from .._context import CallContext",
        "from .._bus import EventBus as Bus",
        "from hookbus._handle import Handle",
        "import hookbus._names",
        "import hookbus._names as names",
        "from .. import _dispatch",
        "from hookbus import _errors",
        "def lazy():\n    from .._options import HookOptions",
        "if TYPE_CHECKING:\n    from .._bus import EventBus",
        "bus = hookbus._bus.EventBus()",
    ],
)
def test_the_check_finds_each_kind_of_private_use(source: str) -> None:
    assert private_imports(source)


@pytest.mark.parametrize(
    "source",
    [
        "from ..adapter import CallContext, rebind",
        "from hookbus.adapter import EventBus",
        "from .. import default_bus",
        "import hookbus",
        "import hookbus.adapter",
        "from ._point import ModulePoint",
        "from hookbus.torch._point import ModulePoint",
        "from torch.utils import _pytree",
        "from . import _tree",
        "hookbus.adapter.rebind",
        "hookbus.__name__",
    ],
)
def test_the_check_allows_the_seam_and_the_adapters_own_modules(source: str) -> None:
    assert not private_imports(source)


def test_the_check_resolves_relative_imports_from_the_module_s_own_package() -> None:
    """A subpackage of the adapter (``hookbus.torch._tables``) reaches the adapter's own
    modules with ``..`` and the core's private ones with ``...``."""
    assert not private_imports("from .._architecture import Architecture", "hookbus.torch._tables")
    assert private_imports("from ..._bus import EventBus", "hookbus.torch._tables")


# --- the seam is what adapters use, documented whole --------------------------------


def test_the_adapter_page_documents_every_name_of_the_seam() -> None:
    import hookbus.adapter

    page = (ROOT / "docs" / "adapters.md").read_text(encoding="utf-8")
    table = page[page.index("## The seam") : page.index("## How a point lives")]
    missing = [name for name in hookbus.adapter.__all__ if f"`{name}" not in table]
    assert not missing, f"docs/adapters.md's table lacks {missing}"


def test_every_name_of_the_seam_is_used_by_an_adapter() -> None:
    import hookbus.adapter

    sources = [path.read_text(encoding="utf-8") for path in sorted(TORCH.rglob("*.py"))]
    sources.append((ROOT / "examples" / "method_hooks.py").read_text(encoding="utf-8"))
    used = " ".join(sources)
    unused = [name for name in hookbus.adapter.__all__ if not re.search(rf"\b{name}\b", used)]
    assert not unused, f"names of hookbus.adapter that no adapter uses: {unused}"


def _imports(path: Path) -> List[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names += [f"{base}.{alias.name}" for alias in node.names]
    return names


def test_the_example_adapter_uses_only_the_public_seam() -> None:
    used = _imports(ROOT / "examples" / "method_hooks.py")
    of_hookbus = sorted({name for name in used if name.startswith("hookbus")})
    assert of_hookbus == [
        "hookbus",
        "hookbus.adapter",
    ]  # import hookbus; from hookbus import adapter
    private = [name for name in used if "._" in name]
    assert not private, private
