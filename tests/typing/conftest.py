# The snippets here are input for the type checkers (tests/test_typing.py); they fail on
# purpose at run time, so pytest must not import them looking for doctests.
from pathlib import Path

collect_ignore = [
    path.name for path in Path(__file__).parent.glob("*.py") if path.name != "conftest.py"
]
