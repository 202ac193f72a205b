"""Compare two commits' benchmark rows side by side, in one run.

Usage (from the repository root, with ``pip install -e ".[bench,torch]"``)::

    python benchmarks/compare.py HEAD~1                 # HEAD~1 against this working tree
    python benchmarks/compare.py BASE HEAD --only 1.    # two revisions, rows starting "1."
    python benchmarks/compare.py HEAD~1 --quick --no-torch --fail-over 10

BASE and HEAD are git revisions; without HEAD, the head side is this working tree
as it is, uncommitted changes included. A revision is checked out in a temporary
git worktree outside the repository, removed at the end (on Ctrl-C and errors too).

How it measures: two worker processes, one per side, each with its own tree first
on ``sys.path``, so that each imports its own hookbus (each says which file it
imported, and the run stops if that is not in its tree). Both run the same case
code: this checkout's ``benchmarks/``, the yardstick you are reading, so that a row
is the same statement on both sides (older trees have no ``build_suite`` to reuse
either). Peers are left out; the floors stay, and since they run the same code on
both sides, their ratios show the noise of the comparison itself. A row that one
side's hookbus cannot build (an API it lacks) is listed as on one side only.

The parent drives the workers one case at a time, round by round, in the order of
``run.py``'s rounds: the base side then the head side, or the other way round,
alternating, so that a case's two samples are taken milliseconds apart and machine
noise hits both alike; only one worker runs at any moment, and both run a case the
same number of times per sample. Per row the table gives the median time on each
side, the median of the per-round ratios head/base, an interval for that median of
at least 95% confidence (order statistics, no assumption on the distribution; under
6 rounds, the min-max, and the header says how confident), the interquartile range
of the ratios, and each side's ratio to the row's floor. A row is marked **slower**
when the interval lies above 1.05: more than 5% slower beyond the noise (faster:
below 0.95). Rows that are a difference of two times (the torch "extra per hook
call" rows) compare the medians, with no interval. Memory rows compare as numbers,
one measurement a side (**larger**: more than 5% more bytes).

Exit status: 0, the comparison being information, unless it could not run (2) or,
with ``--fail-over PCT``, a row is slower (or larger) by more than PCT% beyond the
noise (1).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import IO, Any, Dict, Iterator, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MARGIN = 0.05  # a change may leave no row more than 5% slower

if HERE not in sys.path:  # run as a script or imported
    sys.path.insert(0, HERE)
# Nothing that imports hookbus (_suite, _report, run) is imported here: a worker first
# puts its own tree at the front of sys.path.
import _harness  # noqa: E402


class CannotRun(Exception):
    """The comparison could not run (a bad revision, a worker that died...)."""


def parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the git revision to compare against")
    parser.add_argument(
        "head", nargs="?", help="a git revision (default: this working tree, as it is)"
    )
    parser.add_argument("--only", metavar="ROW", help="only the rows starting with ROW (e.g. 1.)")
    parser.add_argument("--quick", action="store_true", help="few, short rounds (seconds)")
    parser.add_argument("--rounds", type=int, help="rounds (default 61, quick 3)")
    parser.add_argument(
        "--sample-ms", type=float, help="ms per case per round and side (default 10, quick 1)"
    )
    parser.add_argument("--no-torch", action="store_true", help="skip the torch rows")
    parser.add_argument(
        "--fail-over",
        type=float,
        metavar="PCT",
        help="exit 1 when a row is slower by more than PCT%% beyond the noise",
    )
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


class Side:
    """One side of the comparison: a tree, its worker process, and what it reported."""

    def __init__(self, name: str, revision: str, tree: str) -> None:
        self.name = name
        self.revision = revision
        self.tree = tree
        self.process: Optional[subprocess.Popen[str]] = None
        self.hello: Dict[str, Any] = {}

    def start(self, options: Dict[str, Any]) -> None:
        config = json.dumps({"tree": self.tree, **options})
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", config],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=self.tree,
        )

    def receive(self) -> Any:
        assert self.process is not None
        assert self.process.stdout is not None
        reply = self.process.stdout.readline()
        if not reply:
            code = self.process.wait(timeout=30)
            raise CannotRun(f"the {self.name} worker exited ({code}); its error is above")
        return json.loads(reply)

    def ask(self, message: Dict[str, Any]) -> Any:
        assert self.process is not None
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()
        return self.receive()

    def stop(self) -> None:
        """End the worker: the end of its input, or a kill if it does not return then."""
        if self.process is None:
            return
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise CannotRun(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


@contextlib.contextmanager
def checkouts(base: str, head: Optional[str]) -> Iterator[List[Side]]:
    """The two sides: a temporary worktree per revision (removed after), or this tree."""
    temp = tempfile.mkdtemp(prefix="hookbus-compare-")
    made: List[str] = []
    try:
        sides = []
        for name, revision in (("base", base), ("head", head)):
            if revision is None:
                sides.append(Side(name, "this working tree, as it is", ROOT))
                continue
            try:
                commit = _git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
            except CannotRun:
                raise CannotRun(f"{revision!r} names no commit in {ROOT}") from None
            path = os.path.join(temp, name)
            _git("worktree", "add", "--detach", "--quiet", path, commit)
            made.append(path)
            sides.append(Side(name, f"{revision} ({commit[:10]})", path))
        yield sides
    finally:
        # Each worktree by name: the repository is shared, so no `git worktree prune`.
        for path in made:
            subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", path], check=False)
        shutil.rmtree(temp, ignore_errors=True)


def _interval_rank(n: int) -> Tuple[int, float]:
    """k and the confidence of [k-th smallest, k-th largest] as an interval for the median.

    The chance that the median lies below the k-th smallest of n values is
    P(Binomial(n, 1/2) <= k - 1); k is the largest keeping each tail within 2.5%.
    Under 6 values no k does: the interval is then the min-max, less confident.
    """
    tail = 0.5**n
    k = 1
    while tail + math.comb(n, k) * 0.5**n <= 0.025:
        tail += math.comb(n, k) * 0.5**n
        k += 1
    return k, 1 - 2 * tail


class Row:
    """One table line, measured on both sides (per-round samples or one value each)."""

    def __init__(self, base: Dict[str, Any], head: Dict[str, Any]) -> None:
        self.row, self.label = base["row"], base["label"]
        self.base, self.head = base, head
        self.ratio: Optional[float] = None
        self.interval: Optional[Tuple[float, float]] = None
        self.quartiles: Optional[Tuple[float, float]] = None
        self.of_medians = False
        if base["value"] is not None:
            if base["value"] > 0:
                self.ratio = head["value"] / base["value"]
            return
        b, h = base["samples"], head["samples"]
        if min(b + h) <= 0:  # a difference of two times (the torch "extra" rows)
            self.of_medians = True
            if statistics.median(b) > 0:
                self.ratio = statistics.median(h) / statistics.median(b)
            return
        ratios = sorted(x / y for x, y in zip(h, b))
        self.ratio = statistics.median(ratios)
        k, _ = _interval_rank(len(ratios))
        self.interval = (ratios[k - 1], ratios[-k])
        if len(ratios) >= 2:
            q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
            self.quartiles = (q1, q3)

    def worse_by_more_than(self, margin: float) -> bool:
        """Slower (larger) by more than ``margin`` beyond the noise."""
        if self.base["value"] is not None:
            return self.head["value"] > self.base["value"] * (1 + margin)
        return self.interval is not None and self.interval[0] > 1 + margin

    def verdict(self) -> str:
        if self.worse_by_more_than(MARGIN):
            return "**larger**" if self.base["value"] is not None else "**slower**"
        if self.interval is not None and self.interval[1] < 1 - MARGIN:
            return "faster"
        return ""

    def cells(self) -> List[str]:
        import _report

        def measured(side: Dict[str, Any]) -> str:
            if side["value"] is not None:
                return f"{side['value']:,.0f} B"
            return _report.format_ns(statistics.median(side["samples"]) * 1e9)

        def to_floor(side: Dict[str, Any]) -> str:
            return "-" if side["to_floor"] is None else f"{side['to_floor']:.2f}x"

        ratio = "-" if self.ratio is None else f"{self.ratio:.3f}x"
        if self.of_medians:
            ratio += " (of medians)"
        interval = "-" if self.interval is None else "{:.3f}-{:.3f}".format(*self.interval)
        quartiles = "-" if self.quartiles is None else "{:.3f}-{:.3f}".format(*self.quartiles)
        floors = f"{to_floor(self.base)} -> {to_floor(self.head)}"
        if floors == "- -> -":
            floors = "-"
        return [self.row, self.label, measured(self.base), measured(self.head), ratio,
                interval, quartiles, floors, self.verdict()]  # fmt: skip


def measure(args: argparse.Namespace, sides: List[Side]) -> Tuple[int, float, List[str]]:
    """Start the workers and run the rounds: the rounds, seconds per sample, and case keys."""
    rounds = args.rounds or (3 if args.quick else 61)
    sample_s = (args.sample_ms or (1.0 if args.quick else 10.0)) / 1000
    options = {"quick": args.quick, "torch": not args.no_torch, "only": args.only}
    for side in sides:
        side.start(options)
    for side in sides:
        side.hello = side.receive()
        imported = os.path.realpath(side.hello["hookbus"])
        if not imported.startswith(os.path.realpath(side.tree) + os.sep):
            raise CannotRun(f"the {side.name} worker imported {imported}, not its tree's")
    base, head = sides
    keys = base.hello["keys"] + [k for k in head.hello["keys"] if k not in base.hello["keys"]]
    # The same number of statements per sample on both sides: the fewer of the two.
    numbers: Dict[str, int] = {}
    for side in sides:
        calibrated = side.ask({"do": "calibrate", "sample_s": sample_s})
        for key, number in calibrated.items():
            numbers[key] = min(number, numbers.get(key, number))
    for index, order in enumerate(_harness.schedule(keys, rounds=rounds)):
        for position, key in enumerate(order):
            for side in sides if (index + position) % 2 == 0 else sides[::-1]:
                if key in side.hello["keys"]:
                    side.ask({"do": "run", "key": key, "number": numbers[key]})
        if sys.stderr.isatty():
            print(f"\rround {index + 1}/{rounds}", end="", file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    return rounds, sample_s, keys


def pair(sides: List[Side]) -> Tuple[List[Row], Dict[str, Dict[str, int]]]:
    """The lines both sides measured, and, per side, the rows it alone measured (line counts)."""
    base, head = [
        {(line["row"], line["label"]): line for line in side.ask({"do": "report"})}
        for side in sides
    ]
    rows = [Row(line, head[label]) for label, line in base.items() if label in head]
    only: Dict[str, Dict[str, int]] = {"base": {}, "head": {}}
    for name, lines, other in (("base", base, head), ("head", head, base)):
        for row, label in lines:
            if (row, label) not in other:
                only[name][row] = only[name].get(row, 0) + 1
    if not rows and not any(only.values()):
        raise CannotRun("no row to compare (does --only select one?)")
    return rows, only


def compare(args: argparse.Namespace, sides: List[Side], out: IO[str]) -> int:
    """Measure both sides, print the table; the exit status."""
    import _report

    started = time.perf_counter()
    rounds, sample_s, keys = measure(args, sides)
    elapsed = time.perf_counter() - started
    rows, only = pair(sides)

    _, confidence = _interval_rank(rounds)
    base, head = sides
    print(f"# hookbus benchmarks: {base.revision} -> {head.revision}", file=out)
    if args.quick:
        print("\n(quick mode: few rounds, numbers are rough)", file=out)
    print(file=out)
    facts = _report.machine()
    for side in sides:
        facts.append(f"{side.name}: {side.revision}; hookbus from {side.hello['hookbus']}")
    facts.append(f"case code on both sides: {HERE} (this checkout); no peers")
    notes = {side.name: side.hello["notes"] for side in sides}  # one side's marked so
    facts += [note if note in notes["head"] else f"base: {note}" for note in notes["base"]]
    facts += [f"head: {note}" for note in notes["head"] if note not in notes["base"]]
    facts += [f"{side.name} could not build {failed}" for side in sides
              for failed in side.hello["failed"]]  # fmt: skip
    facts.append(
        f"{len(keys)} cases x {rounds} rounds of ~{sample_s * 1000:g} ms a side, one case at "
        f"a time, base and head alternately first, cpu clock; {elapsed:.0f} s in all"
    )
    facts.append(
        f"head/base: median of the per-round ratios; interval: {confidence:.0%} for that "
        f"median; IQR: of the per-round ratios; **slower**: interval above "
        f"{1 + MARGIN:.2f} (faster: below {1 - MARGIN:.2f}); floors run the same code on "
        "both sides (their ratios show the noise)"
    )
    for fact in facts:
        print(f"- {fact}", file=out)
    print(file=out)
    header = ["Row", "Case", "Base", "Head", "Head/base", f"{confidence:.0%} interval",
              "IQR of rounds", "To floor (base -> head)", ""]  # fmt: skip
    print("| " + " | ".join(header) + " |", file=out)
    print("|---|---|---:|---:|---:|---|---|---|---|", file=out)
    for row in rows:
        print("| " + " | ".join(row.cells()) + " |", file=out)
    print(file=out)
    for name, counts in only.items():
        if counts:
            found = "; ".join(f"{row} ({count} lines)" for row, count in counts.items())
            print(f"Only on the {name} side (the other could not build them): {found}.", file=out)
            print(file=out)
    slower = [row for row in rows if row.worse_by_more_than(MARGIN)]
    print(
        f"Slower or larger by more than {MARGIN:.0%} beyond the noise: {len(slower)} of "
        f"{len(rows)} rows.",
        file=out,
    )
    if args.fail_over is None:
        return 0
    failing = [row for row in rows if row.worse_by_more_than(args.fail_over / 100)]
    print(f"--fail-over {args.fail_over:g}: {len(failing)} of {len(rows)} rows over.", file=out)
    return 1 if failing else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse(argv)

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)  # so that the worktrees are removed

    signal.signal(signal.SIGTERM, stop)
    sides: List[Side] = []
    try:
        with checkouts(args.base, args.head) as sides:
            return compare(args, sides, sys.stdout)
    except CannotRun as error:
        print(f"compare.py: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("compare.py: interrupted", file=sys.stderr)
        return 130
    finally:
        for side in sides:
            side.stop()


def worker(config: Dict[str, Any]) -> None:
    """One side: build the cases with this tree's hookbus, then run what the parent asks."""
    sys.path.insert(0, config["tree"])  # before anything imports hookbus
    # Ctrl-C is the parent's to handle: it stops the workers. A worker whose parent
    # died reads the end of its input and returns.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the case code prints goes to stderr, not into the replies

    import run

    import hookbus

    suite = run.build_suite(
        [], quick=config["quick"], torch=config["torch"], only=config["only"], strict=False
    )
    cases = {case.key: case for case in suite.cases}
    hello = {"hookbus": hookbus.__file__, "keys": list(cases)}
    hello.update(notes=suite.notes, failed=suite.failed)
    replies.write(json.dumps(hello) + "\n")
    replies.flush()
    for text in sys.stdin:
        message = json.loads(text)
        reply: Any = {}
        if message["do"] == "calibrate":
            for case in cases.values():
                case.run(1)  # warm up (specialisation, caches) before calibrating
                _harness.calibrate(case, message["sample_s"])
            reply = {key: case.number for key, case in cases.items()}
        elif message["do"] == "run":
            case = cases[message["key"]]
            case.samples.append(case.run(message["number"]))
        elif message["do"] == "report":
            reply = _report_lines(suite)
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def _report_lines(suite: Any) -> List[Dict[str, Any]]:
    """Each table line this side measured: its samples (or value) and its ratio to floor."""
    results = suite.results()
    found = []
    for line in suite.lines:
        value = results.values.get(line.key)
        if value is None and not results.has(line.key):
            continue  # a part that this side's hookbus could not build
        to_floor = None
        if line.floor not in (None, line.key) and results.has(line.key, line.floor):
            with contextlib.suppress(ZeroDivisionError):
                stat = line.stat(results) if line.stat else results.ratio(line.key, line.floor)
                to_floor = stat.median
        samples = None if value is not None else results.cases[line.key].samples
        found.append({"row": line.row, "label": line.label, "value": value,
                      "samples": samples, "to_floor": to_floor})  # fmt: skip
    return found


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(json.loads(sys.argv[2]))
    else:
        sys.exit(main())
