"""Root conftest: run the package's docstring examples without its optional dependencies.

``pytest`` collects ``hookbus/`` with ``--doctest-modules`` (see pyproject.toml), which
imports every module. A module that imports an optional dependency at its top
(``hookbus/torch``, without torch on Python 3.9) can't be imported where that
dependency is missing, so it is left out of collection here, with the reason
printed in the header, instead of failing the run.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any, Dict, List, Optional, Set

PACKAGE = "hookbus"
ROOT = Path(__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _top_level_imports(path: Path, module: str) -> Set[str]:
    """The absolute names of the modules that ``path`` imports unconditionally."""
    is_package = path.name == "__init__.py"
    imported: Set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                package = module.split(".")
                package = package[: len(package) - node.level + (1 if is_package else 0)]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            imported.add(base)
            # ``from . import torch`` may import the submodule hookbus.torch
            imported.update(f"{base}.{alias.name}" for alias in node.names)
    return imported


def _missing_dependency(
    module: str, sources: Dict[str, Path], seen: Dict[str, Optional[str]]
) -> Optional[str]:
    """The missing third-party module that ``module`` needs at import, if any."""
    if module in seen:
        return seen[module]
    seen[module] = None  # an import cycle needs nothing new
    missing: Optional[str] = None
    needed = _top_level_imports(sources[module], module)
    needed.add(module.rpartition(".")[0])  # importing a module imports its package first
    for name in sorted(needed):
        if name.split(".")[0] == PACKAGE:
            # and so does importing any of its submodules
            prefixes = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)]
            for prefix in prefixes:
                if prefix in sources and prefix != module:
                    missing = missing or _missing_dependency(prefix, sources, seen)
        elif name and importlib.util.find_spec(name.split(".")[0]) is None:
            missing = name.split(".")[0]
        if missing:
            break
    seen[module] = missing
    return missing


def _unimportable() -> Dict[str, str]:
    sources = {_module_name(path): path for path in sorted((ROOT / PACKAGE).rglob("*.py"))}
    seen: Dict[str, Optional[str]] = {}
    skipped: Dict[str, str] = {}
    for module, path in sources.items():
        missing = _missing_dependency(module, sources, seen)
        # A module first reached through an import cycle was judged while its package
        # still was: it needs whatever its package needs (a hookbus/torch module that
        # imports no torch itself).
        for package in [m for m in sources if module.startswith(m + ".")]:
            missing = missing or seen.get(package)
        if missing:
            skipped[str(path.relative_to(ROOT))] = missing
    return skipped


_SKIPPED = _unimportable()
collect_ignore: List[str] = sorted(_SKIPPED)


def pytest_report_header() -> List[str]:
    return [
        f"doctests not collected from {path}: needs {missing}, which is not installed"
        for path, missing in sorted(_SKIPPED.items())
    ]


# Frameworks that install without the library their models run on: transformers imports
# without torch, and fails only when a model is built.
_RUNS_ON = {"transformers": "torch", "lightning": "torch", "mmengine": "torch"}


def _imports(source: str) -> Set[str]:
    """The top-level modules an example's code imports (every one of ``import a, b``)."""
    found: Set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def pytest_collection_modifyitems(items: List[Any]) -> None:
    """Skip a docstring example that imports a module missing here, as the docs pages do.

    ``hookbus.bridges`` imports its frameworks only when asked, so its module is collected
    everywhere; the examples that show a framework need it (and say so when skipped).
    """
    import pytest

    for item in items:
        test = getattr(item, "dtest", None)  # a DoctestItem's doctest.DocTest
        if test is None:
            continue
        imported = {name for example in test.examples for name in _imports(example.source)}
        for framework, backend in _RUNS_ON.items():
            if framework in imported:
                imported.add(backend)
        missing = sorted(name for name in imported if importlib.util.find_spec(name) is None)
        if missing:
            reason = f"the example imports {', '.join(missing)}, which is not installed"
            item.add_marker(pytest.mark.skip(reason=reason))
