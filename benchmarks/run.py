"""Benchmark hookbus side by side with blinker, psygnal, pyee and pluggy.

Usage (from the repository root, with ``pip install -e ".[bench,torch]"``)::

    python benchmarks/run.py            # full run (a minute); writes docs/img/emit-vs-hooks.png
    python benchmarks/run.py --quick    # a few seconds; what CI runs so that it keeps working

Every case runs in the same process, in rounds, interleaved with all the others
(see ``_harness.py``); the table gives each case's median time and its ratio to
the floor of its row, measured in the same rounds. Peers (or torch, or
matplotlib) that are not installed are skipped, and the output says so.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_PLOT = os.path.join(ROOT, "docs", "img", "emit-vs-hooks.png")

if HERE not in sys.path:  # run as a script or imported by the test
    sys.path.insert(0, HERE)

import _harness  # noqa: E402
import _memory  # noqa: E402
import _peers  # noqa: E402
import _report  # noqa: E402
import _suite  # noqa: E402
from _harness import Case, run_rounds  # noqa: E402
from _suite import Line, Results  # noqa: E402


def parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few, short rounds (seconds)")
    parser.add_argument("--rounds", type=int, help="rounds (default 61, quick 3)")
    parser.add_argument(
        "--sample-ms", type=float, help="ms per case per round (default 10, quick 1)"
    )
    parser.add_argument(
        "--plot",
        help=f"PNG path (default {DEFAULT_PLOT}; quick mode and --only write one only when given)",
    )
    parser.add_argument("--no-plot", action="store_true", help="don't write the plot")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch rows")
    parser.add_argument(
        "--only", metavar="ROW", help="run only the rows whose name starts with ROW (e.g. 6.)"
    )
    parser.add_argument(
        "--clock",
        choices=sorted(_harness.CLOCKS),
        default="cpu",
        help="cpu: this thread's CPU time (default; ignores time descheduled); wall",
    )
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse(argv)
    _harness.clock = _harness.CLOCKS[args.clock]
    rounds = args.rounds or (3 if args.quick else 61)
    sample_s = (args.sample_ms or (1.0 if args.quick else 10.0)) / 1000
    peers = _peers.available()
    notes: List[str] = []
    missing = [peer for peer in _peers.PEERS if peer not in peers]
    if missing:
        notes.append(
            f"not installed, skipped: {', '.join(missing)} (pip install 'hookbus[bench]')"
        )
    compiled = _peers.psygnal_compiled()
    if compiled is not None:
        notes.append(
            f"psygnal {_peers.version('psygnal')} is "
            + ("the mypyc-compiled build" if compiled else "pure Python (not compiled)")
        )
    for peer in peers:
        if peer != "psygnal":
            notes.append(f"{peer} {_peers.version(peer)}")

    plot_counts = _suite.TABLE_COUNTS if args.quick else (0, 1, 3, 10, 30)
    started = time.perf_counter()
    suite = build_suite(
        peers, quick=args.quick, torch=not args.no_torch, only=args.only, plot_counts=plot_counts
    )
    cases, lines = suite.cases, suite.lines
    notes += suite.notes

    def progress(done: int) -> None:
        if sys.stderr.isatty():
            print(f"\rround {done}/{rounds}", end="", file=sys.stderr, flush=True)

    run_rounds(cases, rounds=rounds, sample_s=sample_s, progress=progress)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    elapsed = time.perf_counter() - started

    results = suite.results()
    text, counts = _report.table(lines, results)
    print(
        "# hookbus benchmarks"
        + (" (quick mode: few rounds, numbers are rough)" if args.quick else "")
    )
    print()
    for fact in _report.machine():
        print(f"- {fact}")
    for note in notes:
        print(f"- {note}")
    print(
        f"- {len(cases)} cases x {rounds} rounds of ~{sample_s * 1000:g} ms each, "
        f"interleaved in shuffled order, timed by {args.clock} clock; {elapsed:.0f} s in all"
    )
    print()
    print(text)
    print()
    print(f"Targets: {counts['met']} met, {counts['missed']} missed.")
    if args.plot is None and not args.quick and not args.only:
        # Quick numbers are too rough for the docs' plot, and --only lacks its rows.
        args.plot = DEFAULT_PLOT
    if args.plot is None or args.no_plot:
        print("Plot: not written (quick mode or --only without --plot, or --no-plot)")
    else:
        others = {case.key.split("/", 1)[1] for case in cases if case.key.startswith("emit")}
        series = ["floor", "hookbus", *sorted(others - {"floor", "hookbus"})]
        build = " (mypyc-compiled)" if compiled else ""
        labels = {name: f"{name}{build}" for name in series if name.startswith("psygnal")}
        why_not = _report.plot(results, plot_counts, series, args.plot, labels)
        print(f"Plot: {why_not}" if why_not else f"Plot written to {os.path.relpath(args.plot)}")
    return 0


class Suite:
    """The cases to time, the table lines that read them, and the untimed values (memory).

    Built part by part (``add``); a part whose rows ``only`` does not select is not
    built. ``strict=False`` records a part that fails to build in ``failed`` instead
    of raising (``compare.py``: a row that an older hookbus cannot run yet).
    """

    def __init__(self, *, only: Optional[str] = None, strict: bool = True) -> None:
        self.only = only
        self.strict = strict
        self.cases: List[Case] = []
        self.lines: List[Line] = []
        self.values: Dict[str, float] = {}
        self.notes: List[str] = []
        self.failed: List[str] = []
        self.derivers: List[Callable[[Results], None]] = []  # per-round values from cases

    def selects(self, rows: Sequence[str]) -> bool:
        """Whether ``only`` may select a line of a part whose rows start with ``rows``."""
        only = self.only
        return only is None or any(r.startswith(only) or only.startswith(r) for r in rows)

    def add(self, rows: Sequence[str], part: Callable[[], Tuple[List[Case], List[Line]]]) -> None:
        """Add the cases and lines of ``part``, whose rows start with one of ``rows``."""
        if not self.selects(rows):
            return
        try:
            cases, lines = part()
        except Exception as error:
            if self.strict:
                raise
            self.failed.append(f"{', '.join(rows)}: {type(error).__name__}: {error}")
            return
        if self.only is not None:  # else every case runs (some only for the plot)
            lines = [line for line in lines if line.row.startswith(self.only)]
            keys = {key for line in lines for key in (line.key, line.floor) if key}
            groups = {key.split("/", 1)[0] for key in keys}
            cases = [case for case in cases if case.key.split("/", 1)[0] in groups]
        self.cases += cases
        self.lines += lines

    def results(self) -> Results:
        """The results of the timed cases, with the values and the derived cases."""
        results = Results(self.cases)
        results.values.update(self.values)
        for derive in self.derivers:
            derive(results)
        return results


def build_suite(
    peers: Sequence[str],
    *,
    quick: bool,
    torch: bool,
    only: Optional[str] = None,
    plot_counts: Sequence[int] = _suite.TABLE_COUNTS,
    strict: bool = True,
) -> Suite:
    """Every row's cases and lines (the torch ones if ``torch`` and installed)."""
    suite = Suite(only=only, strict=strict)

    def emit() -> Tuple[List[Case], List[Line]]:
        cases = _suite.emit_cases(plot_counts, peers)
        return cases, _suite.emit_lines(peers, [case.key for case in cases])

    def measure_memory() -> Tuple[List[Case], List[Line]]:
        suite.values.update(_memory.measure(quick=quick))
        return [], []

    # Memory first, so that its tracemalloc figures are taken before any case exists;
    # its lines go after row 4's scale lines.
    suite.add(["4. memory"], measure_memory)

    def register() -> Tuple[List[Case], List[Line]]:
        return _suite.register_cases(peers), _suite.register_lines(peers)

    suite.add(["1. emit"], emit)
    suite.add(["2. register"], register)
    suite.add(["3. wrapped call"], lambda: (_suite.call_cases(), _suite.call_lines()))
    suite.add(["plan changed"], lambda: (_suite.churn_cases(), _suite.churn_lines()))
    suite.add(["4. scale"], lambda: (_suite.scale_cases(), _suite.scale_lines()))
    if "memory/cycle count" in suite.values:
        suite.add(["4. memory"], lambda: ([], memory_lines(suite.values)))
    suite.add(["tracing off"], lambda: (_suite.trace_cases(), _suite.trace_lines()))
    suite.add(["declared events"], lambda: (_suite.declared_cases(), _suite.declared_lines()))
    suite.add(["fast copies"], lambda: (_suite.copy_cases(), _suite.copy_lines()))
    if torch:
        _add_torch(suite, quick=quick)
    return suite


def memory_lines(values: dict) -> List[Line]:
    row = "4. memory"
    cycles = int(values["memory/cycle count"])
    return [
        Line(
            row,
            "per registered hook, all on one event",
            "memory/per hook, one event",
            None,
            "<= 400 B",
            lambda r: r.values["memory/per hook, one event"] <= 400,
        ),
        Line(
            row,
            "per registered hook, one event each",
            "memory/per hook, one event each",
            None,
            "<= 300 B",
            lambda r: r.values["memory/per hook, one event each"] <= 300,
        ),
        Line(
            row,
            f"growth after {cycles:,} register/remove/emit cycles",
            "memory/cycles",
            None,
            "no growth (< 0.1 B/cycle)",
            lambda r: r.values["memory/cycles"] < 0.1 * cycles,
        ),
    ]


def _add_torch(suite: Suite, *, quick: bool) -> None:
    """Rows 5-10, 13 and 14, or a note saying why not (torch, transformers, ... missing)."""
    import _gpt2_cases
    import _torch_cases

    reason = _torch_cases.unavailable()
    if reason is not None:
        suite.notes.append(f"torch rows skipped: {reason}")
    else:
        suite.notes.append(_torch_cases.describe())
        suite.derivers.append(_torch_cases.derive)
        suite.add(["5. torch"], lambda: (_torch_cases.cases(), _torch_cases.lines()))
        suite.add(["6. torch stats"], lambda: _stats_part(suite, quick=quick))
    gpt2_reason = reason or _gpt2_cases.unavailable()
    if gpt2_reason is not None:
        suite.notes.append(f"GPT-2 rows skipped: {gpt2_reason}")
        return
    import _name_cases
    import _operation_cases
    import _transformer_lens_cases

    suite.derivers.append(_gpt2_cases.derive)
    suite.add(["7. GPT-2", "9. GPT-2"], lambda: (_gpt2_cases.cases(), _gpt2_cases.lines()))
    suite.add(["10. attach"], lambda: (_gpt2_cases.attach_cases(), _gpt2_cases.attach_lines()))
    suite.add(["8. GPT-2"], lambda: (_operation_cases.cases(), _operation_cases.lines()))
    suite.add([_name_cases.ROW], lambda: (_name_cases.cases(), _name_cases.lines()))
    lens_reason = _transformer_lens_cases.unavailable()
    if lens_reason is None:
        part = _transformer_lens_cases
        suite.add([part.ROW], lambda: (part.cases(), part.lines()))
    elif suite.selects([_transformer_lens_cases.ROW]):
        suite.notes.append(f"row 14 skipped: {lens_reason}")
    if suite.selects(["7. GPT-2", "8. GPT-2", "9. GPT-2", "10. attach", _name_cases.ROW]):
        suite.notes.append(_gpt2_cases.describe())


def _stats_part(suite: Suite, *, quick: bool) -> Tuple[List[Case], List[Line]]:
    import _stats_cases

    suite.values.update(_stats_cases.measure(quick=quick))
    return _stats_cases.cases(), _stats_cases.lines()


if __name__ == "__main__":
    sys.exit(main())
