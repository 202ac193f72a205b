"""The package metadata, as pip shows it: built into a wheel, then read back.

The wheel is built from a copy of the project (so nothing is left behind in the checkout),
with the hatchling installed here (the ``dev`` extra); without it the test is skipped.
"""

from __future__ import annotations

import email
import email.message
import importlib.util
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOME = "https://github.com/hookbus/hookbus"


@pytest.fixture(scope="module")
def metadata(tmp_path_factory: pytest.TempPathFactory) -> email.message.Message:
    if importlib.util.find_spec("hatchling") is None:
        pytest.skip('building the wheel needs hatchling installed (pip install -e ".[dev]")')
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "hookbus", source / "hookbus", ignore=shutil.ignore_patterns("__pycache__")
    )
    out = tmp_path_factory.mktemp("wheel")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    build = subprocess.run(
        [*pip_wheel, "--no-index", "--quiet", "--wheel-dir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = out.glob("hookbus-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in archive.namelist())
        return email.message_from_bytes(archive.read(name))


def test_project_urls(metadata: email.message.Message) -> None:
    # No Home-page field: hatchling writes none (the field is deprecated, and
    # pyproject.toml cannot set it). pip show from 23.3 on shows the Homepage project URL
    # as the home page; older pips show an empty Home-page line.
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL", []))
    assert urls["Homepage"] == HOME
    assert set(urls) >= {"Homepage", "Documentation", "Source", "Issues"}
    assert all(url.startswith(HOME) for url in urls.values())


def test_license_field_and_classifier(metadata: email.message.Message) -> None:
    # Older pips show the License field, other tools read only the classifier.
    assert metadata["License"] == "MIT"
    assert "License :: OSI Approved :: MIT License" in metadata.get_all("Classifier", [])


def test_classifiers_name_every_supported_python_and_the_pytest_plugin(
    metadata: email.message.Message,
) -> None:
    classifiers: List[str] = metadata.get_all("Classifier", [])
    versions = sorted(
        (int(c.rsplit(".", 1)[1]) for c in classifiers if re.fullmatch(r".*:: 3\.\d+", c)),
    )
    assert versions == list(range(9, 14))
    assert metadata["Requires-Python"] == ">=3.9"
    assert "Framework :: Pytest" in classifiers
    assert "Typing :: Typed" in classifiers


def test_torch_extra_brings_numpy(metadata: email.message.Message) -> None:
    # Without numpy, importing torch warns "Failed to initialize NumPy" in the demo.
    requires = metadata.get_all("Requires-Dist", [])
    extras = [r for r in requires if re.search(r"extra == [\"']torch[\"']", r)]
    assert any(r.startswith("numpy") for r in extras), extras
