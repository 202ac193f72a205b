# decorated.py is input for the type checkers (tests/test_typing.py); it fails on purpose
# at run time, so pytest must not import it looking for doctests.
collect_ignore = ["decorated.py"]
