"""The documentation site: it builds with no warning, every page exists, links resolve,
and the examples on the pages run.

The strict build (the ``site`` fixture, in ``tests/conftest.py``) needs the ``docs`` extra
(``pip install -e ".[docs]"``); without it those tests are skipped, saying so. The page
examples (``pycon`` blocks) run everywhere. ``test_docs_browser.py`` opens the site in
Chromium.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import inspect
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple
from urllib.parse import unquote, urlsplit

import pytest
from doc_pages import (
    DOCS,
    PAGES,
    ROOT,
    Block,
    Section,
    blocks,
    bound_and_read_names,
    imported_modules,
    sections,
)


def _page_url(page: Path) -> Path:
    """Where MkDocs writes a page (directory URLs): docs/a.md -> a/index.html."""
    relative = page.relative_to(DOCS).with_suffix("")
    if relative.name == "index":
        return relative.parent / "index.html"
    return relative / "index.html"


def test_every_page_is_built(site: Path) -> None:
    built = {page.name: site / _page_url(page) for page in PAGES}
    missing = [name for name, html in built.items() if not html.is_file()]
    assert not missing, f"pages without HTML: {missing}"
    for name, html in built.items():
        text = html.read_text(encoding="utf-8")
        assert "<h1" in text, f"{name} has no title"
    assert (site / "search" / "search_index.json").is_file()


def _public_modules() -> List[str]:
    """The modules whose ``__all__`` the API page documents (hookbus.torch needs torch)."""
    modules = ["hookbus", "hookbus.bridges"]  # the trainers' bridges import them lazily
    if importlib.util.find_spec("torch") and (ROOT / "hookbus" / "torch" / "__init__.py").exists():
        modules.append("hookbus.torch")
    return modules


def test_api_reference_documents_every_public_name(site: Path) -> None:
    import hookbus

    text = (site / "api" / "index.html").read_text(encoding="utf-8")
    undocumented = []
    for module_name in _public_modules():
        module = importlib.import_module(module_name)
        for name in module.__all__:
            # The module-level functions are default_bus's methods, documented on EventBus.
            is_bus_method = module is hookbus and hasattr(hookbus.EventBus, name)
            if f'id="{module_name}.{name}"' not in text and not is_bus_method:
                undocumented.append(f"{module_name}.{name}")
    assert not undocumented, f"missing from the API page: {undocumented}"
    assert '<span class="gp">&gt;&gt;&gt; </span>' in text, "examples don't render as console code"


def test_api_page_lists_every_module_level_function() -> None:
    """The module-level functions are default_bus's bound methods, listed in one paragraph."""
    import hookbus

    text = (DOCS / "api.md").read_text(encoding="utf-8")
    section = text[text.index("## The module-level functions") :]
    paragraph = section[: section.index("\n\n", section.index("\n\n") + 2)]
    # The names in backticks, bare or as hookbus.name, leaving out the links' titles.
    listed = [
        name
        for name in re.findall(r"`(?:hookbus\.)?(\w+)`", paragraph)
        if name not in {"EventBus", "default_bus"}
    ]
    bound = [
        name
        for name in hookbus.__all__
        if getattr(getattr(hookbus, name), "__self__", None) is hookbus.default_bus
    ]
    assert len(listed) == len(set(listed)), f"listed twice: {listed}"
    assert set(listed) == set(bound), f"listed {sorted(listed)}, module-level {sorted(bound)}"


_LINK_ATTRIBUTES = {("a", "href"), ("link", "href"), ("img", "src"), ("script", "src")}


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: List[str] = []
        self.ids: Set[str] = set()

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id":
                self.ids.add(value)
            elif (tag, name) in _LINK_ATTRIBUTES:
                self.links.append(value)


def _parse(html: Path) -> _Links:
    parser = _Links()
    parser.feed(html.read_text(encoding="utf-8"))
    return parser


def _internal_links(site: Path) -> Iterator[Tuple[Path, str, Path, str]]:
    """(page, link, target file, fragment) for every link that stays in the site."""
    for html in sorted(site.rglob("*.html")):
        for link in _parse(html).links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "data:")):
                continue
            # 404.html links from the site root: it is served at any depth
            base = site if parts.path.startswith("/") else html.parent
            path = unquote(parts.path).lstrip("/")
            target = (base / path).resolve() if parts.path else html
            if target.is_dir():
                target = target / "index.html"
            yield html, link, target, unquote(parts.fragment)


def test_internal_links_resolve(site: Path) -> None:
    ids: Dict[Path, Set[str]] = {}
    broken: List[str] = []
    checked = 0
    for html, link, target, fragment in _internal_links(site):
        checked += 1
        where = f"{html.relative_to(site)}: {link}"
        if not target.is_file() or site.resolve() not in target.parents:
            broken.append(f"{where} (no file {target})")
            continue
        if fragment and target.suffix == ".html":
            if target not in ids:
                ids[target] = _parse(target).ids
            if fragment not in ids[target]:
                broken.append(f"{where} (no id {fragment!r} in {target.relative_to(site)})")
    assert checked > 100, f"only {checked} internal links found; is the site built?"
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_page_is_reachable_from_the_home_page(site: Path) -> None:
    home_links = {
        target.resolve()
        for html, _, target, _ in _internal_links(site)
        if html == site / "index.html"
    }
    unreachable = [
        page.name for page in PAGES if (site / _page_url(page)).resolve() not in home_links
    ]
    assert not unreachable, f"pages missing from the navigation: {unreachable}"


# --- the docstrings ------------------------------------------------------------------

_DOCUMENTED_MODULES = [
    "hookbus",
    "hookbus.training",
    "hookbus.bridges",
    "hookbus.pytest_plugin",
    "hookbus.torch",
]


def _exported_callables() -> List[Tuple[str, object]]:
    found = []
    for module_name in _DOCUMENTED_MODULES:
        if module_name == "hookbus.torch" and not importlib.util.find_spec("torch"):
            continue
        if importlib.util.find_spec(module_name) is None:
            continue  # a module not written yet
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            value = getattr(module, name)
            # Type aliases (Literal[...], Union[...]) are callable but documented as data.
            if callable(value) and type(value).__module__ not in {"typing", "typing_extensions"}:
                found.append((f"{module_name}.{name}", value))
    return found


def test_every_exported_class_and_function_has_a_docstring_example() -> None:
    """The docstring examples are the API reference's examples, and pytest runs them."""
    missing = [
        name for name, value in _exported_callables() if ">>>" not in (inspect.getdoc(value) or "")
    ]
    assert not missing, f"exported without a docstring example: {missing}"


def test_the_nav_lists_each_page_once() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config[config.index("\nnav:") :]
    listed = re.findall(r"^\s+- [^:\n]+:\s*(\S+\.md)\s*$", nav, re.M)
    twice = sorted({page for page in listed if listed.count(page) > 1})
    assert not twice, f"mkdocs.yml lists these pages more than once: {twice}"
    pages = {str(page.relative_to(DOCS)) for page in PAGES}
    assert set(listed) == pages, f"nav and docs/ differ: {set(listed) ^ pages}"


# --- the pages themselves -----------------------------------------------------------


def _readme_block(marker: str) -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(rf"<!-- {marker} -->\s*```\w*\n(.*?)```\s*<!-- /{marker} -->", readme, re.S)
    assert found, f"README.md has no {marker} block"
    return found.group(1).strip()


@pytest.mark.parametrize("marker", ["demo-command", "test-command", "quick-test-command"])
def test_getting_started_shows_the_readme_commands(marker: str) -> None:
    command = _readme_block(marker)
    page = (DOCS / "index.md").read_text(encoding="utf-8")
    assert f"```bash\n{command}\n```" in page, f"docs/index.md lacks the README's {marker}"


# --- the console examples on the pages, in page order and each section alone -------------


def _run_examples(page: Path, blocks: List[Block]) -> Tuple[int, List[str]]:
    """Run console blocks as doctests, in order, in one fresh namespace.

    A block that imports a module missing here (a peer library, or torch) is skipped,
    and so is a later block that reads a name a skipped block would have bound (its
    ``import time`` first or not), until a block that runs binds that name. Whatever the
    blocks register on ``hookbus.default_bus`` is gone afterwards. Returns how many
    blocks ran and which were skipped; fails the test if an example failed.
    """
    import hookbus
    from hookbus.pytest_plugin import isolate

    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    namespace: Dict[str, object] = {"__name__": f"docs.{page.stem}"}
    ran, skipped = 0, []
    unbound: Set[str] = set()  # what the skipped blocks would have bound
    with isolate(hookbus.default_bus):
        for line, block in blocks:
            bound, read = bound_and_read_names(block)
            missing = sorted(
                {m for m in imported_modules(block) if not importlib.util.find_spec(m)}
            )
            needed = sorted(read & unbound)
            if missing or needed:
                unbound |= bound
                parts = [f"needs {', '.join(missing)}"] if missing else []
                parts += [f"reads {', '.join(needed)} of a skipped block"] if needed else []
                skipped.append(f"line {line} ({'; '.join(parts)})")
                continue
            unbound -= bound
            name = f"{page.name}:{line}"
            test = parser.get_doctest(block, namespace, name, str(page), line)
            runner.run(test, clear_globs=False)
            namespace = test.globs  # DocTest works on a copy of the namespace it is given
            ran += 1
    failed, attempted = runner.summarize(verbose=False)
    assert failed == 0, f"{failed} of {attempted} examples failed on {page.name} (output above)"
    return ran, skipped


def test_a_block_is_skipped_when_any_module_it_imports_is_missing(tmp_path: Path) -> None:
    """``import asyncio, a_peer``: the peer missing skips the block, and the blocks that
    read what it would have bound, their own imports first or not."""
    page = tmp_path / "page.md"
    console = [
        (1, ">>> import asyncio, a_peer_that_is_not_installed\n>>> net = 1\n"),
        (5, ">>> a_peer_that_is_not_installed.Signal()\n"),
        (9, ">>> import time\n>>> time.sleep(0) or net\n"),
        (13, ">>> import hookbus\n>>> net = hookbus.EventBus()\n"),
        (17, ">>> net.emit('ready')\n"),
    ]
    ran, skipped = _run_examples(page, [Block(line, source) for line, source in console])
    assert skipped == [
        "line 1 (needs a_peer_that_is_not_installed)",
        "line 5 (reads a_peer_that_is_not_installed of a skipped block)",
        "line 9 (reads net of a skipped block)",
    ]
    assert ran == 2  # line 13 binds net again: line 17 reads the one that ran


@pytest.mark.parametrize(
    "page", [page for page in PAGES if blocks(page)], ids=lambda page: page.name
)
def test_page_examples_run_in_page_order(page: Path) -> None:
    """Each page's console examples run in order, in one namespace, as doctests."""
    ran, skipped = _run_examples(page, blocks(page))
    if not ran:
        pytest.skip(f"every example of {page.name} needs a missing module: {skipped}")


def _with_what_it_continues(section: Section) -> List[Block]:
    """The section's blocks, after those of the sections it continues (and theirs)."""
    by_anchor = {found.anchor: found for found in sections(section.page)}
    order = [found.anchor for found in by_anchor.values()]
    blocks: List[Block] = []
    for anchor in section.continues:
        assert anchor in by_anchor, f"{section.title!r} continues #{anchor}: no such section"
        earlier = by_anchor[anchor]
        assert order.index(anchor) < order.index(section.anchor), (
            f"{section.title!r} continues #{anchor}, which comes after it"
        )
        assert earlier.blocks, f"{section.title!r} continues #{anchor}, which has no example"
        blocks += [block for block in _with_what_it_continues(earlier) if block not in blocks]
    return blocks + section.blocks


_SECTIONS = [section for page in PAGES for section in sections(page) if section.blocks]


@pytest.mark.parametrize(
    "section", _SECTIONS, ids=lambda section: f"{section.page.name}#{section.anchor or 'top'}"
)
def test_each_section_runs_alone(section: Section) -> None:
    """A reader who jumps to a section can run its examples in a fresh interpreter.

    A section starts with the set-up its examples need, or says which earlier section
    its examples continue ("Continues [Attaching a model](#attaching-a-model)"): then
    that section's examples run first.
    """
    ran, skipped = _run_examples(section.page, _with_what_it_continues(section))
    if not ran:
        pytest.skip(f"every example of this section needs a missing module: {skipped}")


def test_the_docs_test_sees_every_console_block() -> None:
    """The section parser finds each ```pycon block the pages hold, none twice."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert len(blocks(page)) == text.count("```pycon\n"), page.name
    assert sum(len(section.blocks) for section in _SECTIONS) > 90


def test_the_home_pages_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The ten-line example on the home page: plain code a reader pastes, and it works."""
    import hookbus

    text = (DOCS / "index.md").read_text(encoding="utf-8")
    block = re.search(r"^```python\n(.*?)^```", text, re.S | re.M)
    assert block, "the home page has no Python example"
    code = block.group(1)
    assert len(code.strip().splitlines()) <= 14, "the first example should stay short"
    try:
        exec(compile(code, "docs/index.md", "exec"), {"__name__": "docs.index"})
    finally:
        hookbus.clear()
    assert capsys.readouterr().out == "mail for 17\n"


# --- the pages read raw, as the code host shows them ----------------------------------

# The README and pyproject.toml's Documentation link lead to the Markdown on the code
# host, which knows nothing of MkDocs: its plugins' syntax would show as written there.
_CODE_HOST_BREAKERS = {
    "an autoref ([text][hookbus.name]: write [text](api.md#hookbus.name))": re.compile(
        r"\]\[[\w.]+\]"
    ),
    "an include (--8<--: put the included text in the page)": re.compile(r"^\s*-{2}8<-{2}", re.M),
}
# The pages generated from docstrings say so, and how to read them.
_DIRECTIVE_PAGES = {"api.md", "testing.md"}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_the_page_reads_as_plain_markdown_on_the_code_host(page: Path) -> None:
    text = _prose(page.read_text(encoding="utf-8"))
    for what, pattern in _CODE_HOST_BREAKERS.items():
        found = pattern.search(text)
        assert not found, f"{page.name} holds {what}: {found.group(0)!r}"
    if re.search(r"^::: ", text, re.M):
        assert page.name in _DIRECTIVE_PAGES, f"{page.name}: ::: directives show raw"
        assert "help(hookbus." in text, f"{page.name}: say how to read it raw"


def _prose(text: str) -> str:
    """The Markdown without its fenced code blocks (code may hold anything)."""
    return re.sub(r"^(`{3,})\w*\n.*?^\1\s*$", "", text, flags=re.S | re.M)


def test_the_adapter_page_shows_the_example_file_in_full() -> None:
    """docs/adapters.md holds examples/method_hooks.py's code, the same, byte for byte."""
    page = (DOCS / "adapters.md").read_text(encoding="utf-8")
    section = page[page.index("## The whole adapter") :]
    shown = re.search(r"^```python\n(.*?)^```", section, re.S | re.M)
    assert shown, "adapters.md lost its code block"
    assert shown.group(1) == (ROOT / "examples" / "method_hooks.py").read_text(encoding="utf-8")
