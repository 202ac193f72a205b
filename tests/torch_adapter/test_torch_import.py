"""Importing: ``import hookbus`` never imports torch, and ``import hookbus.torch`` without
torch says how to install it."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_import_hookbus_does_not_import_torch() -> None:
    code = "import sys, hookbus; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_import_hookbus_torch_without_torch_says_how_to_install() -> None:
    code = textwrap.dedent(
        """
        import sys

        class HideTorch:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, HideTorch())
        import hookbus
        try:
            import hookbus.torch
        except ImportError as error:
            print(error)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert "pip install torch" in result.stdout
    assert 'pip install -e ".[torch]"' in result.stdout  # hookbus is not on PyPI
