"""``python -m hookbus.demo``: the README's tour of every part of hookbus.

The tour is ``examples/tour.py`` in a checkout: the installed library ships no demo
code. From a checkout installed as the README says (an editable install), this module
runs that file; from a wheel, it says where the tour is and exits with status 1.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

_TOUR = Path(__file__).resolve().parent.parent / "examples" / "tour.py"


def _main() -> int:
    if not _TOUR.is_file():
        print(
            "hookbus's tour is examples/tour.py in a checkout of hookbus "
            "(https://github.com/hookbus/hookbus); install the checkout as its README says "
            "and run python -m hookbus.demo there, or python examples/tour.py",
            file=sys.stderr,
        )
        return 1
    runpy.run_path(str(_TOUR), run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
