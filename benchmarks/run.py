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
from typing import List, Optional, Sequence

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

    values = _memory.measure(quick=args.quick)

    cases: List[Case] = []
    cases += _suite.emit_cases(plot_counts, peers)
    cases += _suite.register_cases(peers)
    cases += _suite.call_cases()
    cases += _suite.scale_cases()
    cases += _suite.trace_cases()
    cases += _suite.declared_cases()
    lines: List[Line] = []
    lines += _suite.emit_lines(peers, [case.key for case in cases])
    lines += _suite.register_lines(peers)
    lines += _suite.call_lines()
    lines += _suite.scale_lines()
    lines += memory_lines(values)
    lines += _suite.trace_lines()
    lines += _suite.declared_lines()

    torch_rows = None
    gpt2_rows = None
    if not args.no_torch:
        import _gpt2_cases
        import _torch_cases

        reason = _torch_cases.unavailable()
        if reason is None:
            torch_rows = _torch_cases
            cases += _torch_cases.cases()
            lines += _torch_cases.lines()
            notes.append(_torch_cases.describe())
            import _stats_cases

            values.update(_stats_cases.measure(quick=args.quick))
            cases += _stats_cases.cases()
            lines += _stats_cases.lines()
        else:
            notes.append(f"torch rows skipped: {reason}")
        gpt2_reason = reason or _gpt2_cases.unavailable()
        if gpt2_reason is None:
            import _name_cases
            import _operation_cases

            gpt2_rows = _gpt2_cases
            cases += _gpt2_cases.cases()
            lines += _gpt2_cases.lines()
            cases += _gpt2_cases.attach_cases()
            lines += _gpt2_cases.attach_lines()
            cases += _operation_cases.cases()
            lines += _operation_cases.lines()
            cases += _name_cases.cases()
            lines += _name_cases.lines()
            notes.append(_gpt2_cases.describe())
        else:
            notes.append(f"GPT-2 rows skipped: {gpt2_reason}")

    if args.only:
        lines = [line for line in lines if line.row.startswith(args.only)]
        keys = {key for line in lines for key in (line.key, line.floor) if key}
        groups = {key.split("/", 1)[0] for key in keys}
        cases = [case for case in cases if case.key.split("/", 1)[0] in groups]

    def progress(done: int) -> None:
        if sys.stderr.isatty():
            print(f"\rround {done}/{rounds}", end="", file=sys.stderr, flush=True)

    run_rounds(cases, rounds=rounds, sample_s=sample_s, progress=progress)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    elapsed = time.perf_counter() - started

    results = Results(cases)
    results.values.update(values)
    if torch_rows is not None:
        torch_rows.derive(results)
    if gpt2_rows is not None:
        gpt2_rows.derive(results)
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
            "<= 400 B",
            lambda r: r.values["memory/per hook, one event each"] <= 400,
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


if __name__ == "__main__":
    sys.exit(main())
