"""The documentation pages read as the docs tests read them: sections and console blocks.

A *section* is the text under one heading, down to the next heading of any level (the
text above the first ``##`` heading is a section too). Its examples are its ```pycon
blocks. A section may say that its examples go on from an earlier section's, in a line
of prose such as "*Continues [Attaching a model](#attaching-a-model): run its example
first.*": ``continues`` holds those anchors.
"""

from __future__ import annotations

import ast
import doctest
import re
import unicodedata
from pathlib import Path
from typing import List, NamedTuple, Optional, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(path for path in DOCS.rglob("*.md") if "_ext" not in path.parts)

_HEADING = re.compile(r"^(#{1,6}) +(.+?) *#*$")
_FENCE = re.compile(r"^(`{3,})(\w*)")
_CONTINUES = re.compile(r"\b[Cc]ontinues (.*)")
_ANCHOR_LINK = re.compile(r"\]\(#([\w-]+)\)")


def slug(title: str) -> str:
    """The anchor MkDocs gives a heading (Python-Markdown's toc slugify, on its text)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


class Block(NamedTuple):
    line: int  # of the block's first line of code, in the page
    source: str


class Section(NamedTuple):
    page: Path
    anchor: str  # "" for the text above the first "##" heading
    title: str
    blocks: List[Block]  # its ```pycon blocks, in order
    continues: List[str]  # the anchors of the earlier sections it says it continues
    prose: List[str]  # its lines outside code blocks


def sections(page: Path) -> List[Section]:
    text = page.read_text(encoding="utf-8")
    found = [Section(page, "", page.stem, [], [], [])]
    fence: Optional[str] = None
    language, code, start = "", [], 0
    for number, line in enumerate(text.splitlines(), 1):
        if fence is not None:
            if line.strip() == fence:
                if language == "pycon":
                    found[-1].blocks.append(Block(start, "".join(code)))
                fence = None
            else:
                code.append(line + "\n")
            continue
        opened = _FENCE.match(line)
        heading = _HEADING.match(line)
        if opened:
            fence, language, code, start = opened.group(1), opened.group(2), [], number + 1
        elif heading and len(heading.group(1)) > 1:
            title = heading.group(2)
            found.append(Section(page, slug(title), title, [], [], []))
        else:
            found[-1].prose.append(line)
            continued = _CONTINUES.search(line)
            if continued:
                found[-1].continues.extend(_ANCHOR_LINK.findall(continued.group(1)))
    return found


def blocks(page: Path) -> List[Block]:
    return [block for section in sections(page) for block in section.blocks]


def imported_modules(console: str) -> List[str]:
    """The top-level modules a console block (``>>>`` lines) imports, in order: every
    module of ``import a, b``, and ``x`` of ``from x.y import z``."""
    names = []
    for example in doctest.DocTestParser().get_examples(console):
        for node in ast.walk(ast.parse(example.source)):
            if isinstance(node, ast.Import):
                names += [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.append(node.module.split(".")[0])
    return names


def bound_and_read_names(console: str) -> Tuple[Set[str], Set[str]]:
    """The names a console block binds (assignments, imports, ``def``, ``class``) and the
    names it reads, at any depth."""
    bound: Set[str] = set()
    read: Set[str] = set()
    for example in doctest.DocTestParser().get_examples(console):
        for node in ast.walk(ast.parse(example.source)):
            if isinstance(node, ast.Name):
                (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return bound, read
