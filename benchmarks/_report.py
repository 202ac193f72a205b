"""The results table (Markdown) and the plot of emit cost against hook count."""

from __future__ import annotations

import os
import platform
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from _suite import Line, Results


def machine() -> List[str]:
    """What the numbers ran on."""
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as info:
            for text in info:
                if text.startswith("model name"):
                    cpu = text.split(":", 1)[1].strip()
                    break
    except OSError:
        cpu = platform.processor() or cpu
    return [
        f"CPU: {cpu}, {os.cpu_count()} logical cores (nproc)",
        f"Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.release()}",
    ]


def format_ns(ns: float) -> str:
    if ns >= 10_000:
        return f"{ns / 1000:,.1f} us"
    return f"{ns:,.1f} ns"


def _verdict(line: Line, results: Results) -> str:
    if line.judge is None:
        return ""
    outcome = line.judge(results)
    if outcome is None:
        return "n/a"
    return "met" if outcome else "**missed**"


def table(lines: Sequence[Line], results: Results) -> Tuple[str, Dict[str, int]]:
    """The Markdown table, and the count of targets met and missed."""
    out = [
        "| Row | Case | Median time | Ratio to floor: median (min-max) | Target | Result |",
        "|---|---|---:|---|---|---|",
    ]
    counts = {"met": 0, "missed": 0}
    for line in lines:
        if line.key in results.values:
            value = results.values[line.key]
            median, spread = f"{value:,.0f} B", "-"
        elif results.has(line.key) and (line.floor is None or results.has(line.floor)):
            median = format_ns(results.ns(line.key).median)
            if line.stat is not None:
                spread = f"{line.stat(results).median:.2f}x (of medians)"
            elif line.floor is None:
                spread = "-"
            else:
                stat = results.ratio(line.key, line.floor)
                spread = f"{stat.median:.2f}x ({stat.low:.2f}-{stat.high:.2f})"
        else:
            continue
        verdict = _verdict(line, results)
        if verdict == "met":
            counts["met"] += 1
        elif verdict == "**missed**":
            counts["missed"] += 1
        out.append(
            f"| {line.row} | {line.label} | {median} | {spread} | {line.target} | {verdict} |"
        )
    return "\n".join(out), counts


def plot(
    results: Results,
    counts: Sequence[int],
    series: Sequence[str],
    path: str,
    labels: Optional[Dict[str, str]] = None,
) -> Optional[str]:
    """Emit cost against hook count, one line per library; returns None or why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'hookbus[bench]')"
    figure, axes = plt.subplots(figsize=(8, 5), dpi=110)
    for label in series:
        xs = [n for n in counts if results.has(f"emit{n}/{label}")]
        ys = [results.ns(f"emit{n}/{label}").median for n in xs]
        if not xs:
            continue
        style = {"linewidth": 2.6, "color": "black"} if label == "hookbus" else {}
        if label == "floor":
            style = {"linestyle": "--", "color": "grey"}
        axes.plot(xs, ys, marker="o", label=(labels or {}).get(label, label), **style)
    axes.set_xlabel("no-op hooks (listeners) connected")
    axes.set_ylabel("emit cost, ns (median)")
    axes.set_title(f"Emit cost against hook count (Python {platform.python_version()})")
    axes.set_yscale("log")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return None


def python_version() -> str:
    return sys.version.split()[0]
