"""Write ``hookbus/_sync_dispatch.py`` from ``hookbus/_async_dispatch.py``: one body, two variants.

Usage (from the repository root)::

    python .ci/unasync.py          # rewrite the sync variant
    python .ci/unasync.py --check  # exit 1 if it is out of date (a test runs this)

httpcore writes its sync code this way (its ``unasync.py``). The rules, applied to
the async source line by line:

* a line that ends with ``# async only`` is left out; when it is the first line of
  a top-level statement (a ``def``, a ``class``), the whole statement is;
* a line ``# sync only: CODE`` becomes ``CODE``, at the comment's indentation;
* then :data:`SUBSTITUTIONS`, in order: async spellings become sync ones, and
  each function ``name_async`` of the source is called ``name``.

The module docstring is replaced by :data:`HEADER`. The output must be what
``ruff format`` writes (CI checks the package): write the source so that it is.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import List, Tuple

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "hookbus" / "_async_dispatch.py"
TARGET = ROOT / "hookbus" / "_sync_dispatch.py"

HEADER = '''"""The sync dispatch loops, generated from ``_async_dispatch.py``: do not edit.

Change the async source, then run ``python .ci/unasync.py`` (a test checks this file).
"""
'''

# (pattern, replacement), applied in this order to every line that is kept.
SUBSTITUTIONS: List[Tuple[str, str]] = [
    # An around hook of an async point is a generator or an async generator.
    (r"\(await _anext\(around\) if async_gen else (next\(around, FINISHED\))\)", r"\1"),
    (r"await around\.athrow\(error\) if async_gen else (around\.throw\(error\))", r"\1"),
    (r"await around\.aclose\(\) if async_gen else (around\.close\(\))", r"\1"),
    (r"except \(StopIteration, StopAsyncIteration\):", "except StopIteration:"),
    (r"typing\.Awaitable\[Any\]", "Any"),
    (r"\basync def\b", "def"),
    (r"\bawait ", ""),
]

_ASYNC_ONLY = "# async only"
_SYNC_ONLY = re.compile(r"^(\s*)# sync only: (.*)$")


def _docstring_end(source: str) -> int:
    """The number of lines the module docstring takes."""
    tree = ast.parse(source)
    first = tree.body[0]
    is_docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    return first.end_lineno or 0 if is_docstring else 0


def _renames(source: str) -> List[Tuple[str, str]]:
    """``(r"\\bname_async\\b", "name")`` for each top-level ``async def name_async``."""
    names = [
        node.name
        for node in ast.parse(source).body
        if isinstance(node, ast.AsyncFunctionDef) and node.name.endswith("_async")
    ]
    return [(rf"\b{name}\b", name[: -len("_async")]) for name in names]


def generate(source: str) -> str:
    substitutions = SUBSTITUTIONS + _renames(source)
    lines = source.splitlines()
    out: List[str] = []
    skipping = False
    for line in lines[_docstring_end(source) :]:
        top_level = bool(line) and not line[0].isspace() and not line.startswith((")", "]"))
        if top_level:
            skipping = line.rstrip().endswith(_ASYNC_ONLY)
        if skipping or line.rstrip().endswith(_ASYNC_ONLY):
            continue
        match = _SYNC_ONLY.match(line)
        if match:
            line = match.group(1) + match.group(2)
        for pattern, replacement in substitutions:
            line = re.sub(pattern, replacement, line)
        out.append(line)
    text = HEADER + "\n".join(out).rstrip() + "\n"
    return re.sub(r"\n{4,}", "\n\n\n", text)  # what dropped definitions leave


def main(argv: List[str]) -> int:
    generated = generate(SOURCE.read_text(encoding="utf-8"))
    if "--check" in argv:
        if TARGET.read_text(encoding="utf-8") != generated:
            print(f"{TARGET} is out of date: run python .ci/unasync.py")
            return 1
        return 0
    TARGET.write_text(generated, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
