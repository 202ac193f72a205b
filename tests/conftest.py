"""Fixtures shared by test modules: the documentation site, built once per run."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

DOCS_EXTRA = {"mkdocs": "mkdocs", "material": "mkdocs-material", "mkdocstrings": "mkdocstrings"}


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs site, built with ``mkdocs build --strict``; it must not warn."""
    missing = [dist for module, dist in DOCS_EXTRA.items() if not importlib.util.find_spec(module)]
    if missing:
        pytest.skip(
            f"the docs extra is not installed (missing {', '.join(missing)}); "
            f'pip install -e ".[docs]" to build the site'
        )
    site_dir = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    output = build.stdout + build.stderr
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{output}"
    warnings = [line for line in output.splitlines() if "WARNING" in line]
    assert not warnings, "the docs build warned:\n" + "\n".join(warnings)
    return site_dir
