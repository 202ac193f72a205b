"""Importing a trainer's framework, or saying which extra installs it."""

from __future__ import annotations

import importlib
from typing import Any, Dict, Tuple

EXTRAS: Dict[str, Tuple[Tuple[str, str], ...]] = {
    # extra -> the modules its bridge needs, each with the distribution users know
    "hf": (("transformers", "transformers"), ("accelerate", "accelerate")),
    "lightning": (("lightning.pytorch", "lightning"),),
    "mmengine": (("mmengine.hooks", "mmengine"), ("mmengine.runner", "mmengine")),
}


def require(extra: str, module: str) -> Any:
    """``module``, once every module of ``extra`` imports; else an ImportError naming the extra."""
    for name, package in EXTRAS[extra]:
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise ImportError(
                f"the {_TRAINERS[extra]} bridge needs {package}, which is not installed: "
                f'pip install "hookbus[{extra}]" (from a hookbus checkout: '
                f'pip install torch==2.13.0 -e ".[{extra}]")'
            ) from error
    return importlib.import_module(module)


_TRAINERS = {"hf": "Hugging Face", "lightning": "Lightning", "mmengine": "mmengine"}
