"""Draw hookbus's module import graph, from the code, as ``docs/img/modules.svg``.

Usage (from the repository root)::

    python docs/_ext/module_graph.py          # rewrite the picture
    python docs/_ext/module_graph.py --check  # exit 1 if it is out of date (a test runs this)

Each box is a module of ``hookbus/`` (package ``__init__`` files left out: they
only re-export), each arrow a runtime import between two of them (imports under
``if TYPE_CHECKING:`` are left out: they are for type checkers only). A module
sits one row above the highest module it imports, so the arrows all point down
and the bottom row imports nothing of hookbus.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGE = ROOT / "hookbus"
OUTPUT = ROOT / "docs" / "img" / "modules.svg"

BOX_W, BOX_H, GAP_X, ROW_H, MARGIN = 128, 28, 14, 78, 20


def module_name(path: Path) -> str:
    """``hookbus/torch/_point.py`` -> ``hookbus.torch._point``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, except those under ``if TYPE_CHECKING:``."""
    stack: List[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            is_type_only = (
                isinstance(child, ast.If)
                and isinstance(child.test, ast.Name)
                and child.test.id == "TYPE_CHECKING"
            )
            if is_type_only:
                stack.extend(child.orelse)
            else:
                stack.append(child)


def imports_of(path: Path) -> Set[str]:
    """The hookbus modules that ``path`` imports at run time (absolute names)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: Set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("hookbus"):
                found.add(target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("hookbus"))
    found.discard(name)
    return found


def graph() -> Dict[str, Set[str]]:
    """Module -> the modules it imports, package ``__init__`` files left out."""
    paths = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")
    modules = {module_name(p): p for p in paths}
    return {name: imports_of(path) & set(modules) for name, path in modules.items()}


def rows(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """Modules by row: row 0 imports nothing of hookbus; each row above imports a row below."""
    depth: Dict[str, int] = {}

    def level(name: str, seen: Tuple[str, ...] = ()) -> int:
        if name not in depth:
            # Sorted: an import cycle is cut where the walk meets it, so set order
            # (string hashing) would move modules between rows from run to run.
            below = [level(dep, (*seen, name)) for dep in sorted(edges[name]) if dep not in seen]
            depth[name] = 1 + max(below) if below else 0
        return depth[name]

    for name in edges:
        level(name)
    table: List[List[str]] = [[] for _ in range(max(depth.values()) + 1)]
    for name in sorted(edges):
        table[depth[name]].append(name)
    return table


def render() -> str:
    """The SVG text of the current module graph."""
    edges = graph()
    table = rows(edges)
    width = max(len(row) for row in table) * (BOX_W + GAP_X) - GAP_X + 2 * MARGIN
    height = len(table) * ROW_H - (ROW_H - BOX_H) + 2 * MARGIN + 24
    where: Dict[str, Tuple[float, float]] = {}
    for index, row in enumerate(table):
        y = MARGIN + (len(table) - 1 - index) * ROW_H
        span = len(row) * (BOX_W + GAP_X) - GAP_X
        for column, name in enumerate(row):
            where[name] = ((width - span) / 2 + column * (BOX_W + GAP_X), y)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="12">',
        "<title>hookbus modules: an arrow goes from a module to a module it imports</title>",
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#777"/></marker></defs>',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    for name in sorted(edges):
        x1, y1 = where[name]
        for dep in sorted(edges[name]):
            x2, y2 = where[dep]
            out.append(
                f'<line x1="{x1 + BOX_W / 2:.0f}" y1="{y1 + BOX_H:.0f}" x2="{x2 + BOX_W / 2:.0f}" '
                f'y2="{y2:.0f}" stroke="#999" stroke-width="1" marker-end="url(#arrow)"/>'
            )
    for name, (x, y) in sorted(where.items()):
        torch, bridge = name.startswith("hookbus.torch"), name.startswith("hookbus.bridges")
        fill = "#fdebd3" if torch else "#e2f3e2" if bridge else "#e3edf9"
        label = name.replace("hookbus.", "").replace("torch.", "torch/")
        label = label.replace("bridges.", "bridges/")
        out.append(
            f'<rect x="{x:.0f}" y="{y:.0f}" width="{BOX_W}" height="{BOX_H}" rx="5" '
            f'fill="{fill}" stroke="#557"/>'
        )
        out.append(
            f'<text x="{x + BOX_W / 2:.0f}" y="{y + BOX_H / 2 + 4:.0f}" '
            f'text-anchor="middle">{label}</text>'
        )
    out.append(
        f'<text x="{MARGIN}" y="{height - 10:.0f}" fill="#555">Generated by '
        f"docs/_ext/module_graph.py: blue, the core; orange, the torch adapter; green, the "
        f"trainer bridges; "
        f"an arrow points to an imported module.</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: List[str]) -> int:
    text = render()
    if "--check" in argv:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is out of date: run python docs/_ext/module_graph.py")
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
