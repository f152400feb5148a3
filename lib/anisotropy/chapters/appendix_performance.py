"""The performance appendix: the committed benchmark tables (``benchmarks/results``) as the page shows them."""

from __future__ import annotations

import ast

import pandas as pd
from IPython.display import display

# The speed goals of the measurement core (issue 3; benchmarks/bench_metrics.py measures them): the exact mean cosine
# within 2x of numpy merely summing the array, TwoNN within 1.5x of one float32 n x n x d product.
GOALS = {"mean_cosine": 2.0, "twonn": 1.5, "profile": 1.3}  # profile: issue 47, over the bare forward passes
# ... and TwoNN estimates within this relative difference of the peer implementations (scikit-dimension, DADApy).
PEER_AGREEMENT = 0.02


def goal_words(section: str, ratio: float) -> str:
    """"meets" when the measured ``ratio`` (time / the section's reference time) is at most the section's goal in
    ``GOALS``, else "misses"."""
    return "meets" if ratio <= GOALS[section] else "misses"


def fmt_seconds(s: float) -> str:
    """A duration in seconds as the page writes it ("" for NaN; ms, s, h, days or years)."""
    if s != s:
        return ""
    if s >= 86400 * 365:
        return f"{s / (86400 * 365):.2g} years"
    if s >= 86400:
        return f"{s / 86400:.3g} days"
    if s >= 3600:
        return f"{s / 3600:.3g} h"
    return f"{s:.3g} s" if s >= 0.01 else f"{s * 1e3:.3g} ms"


def show(table: pd.DataFrame, section: str, columns=("n", "method", "time", "ratio", "value", "abs_diff", "note")):
    """Display the rows of one section of the metrics benchmark table, times and numbers formatted; returns None."""
    frame = table[table.section == section].copy()
    frame["time"] = [fmt_seconds(s) + (" (extrapolated)" if e else "")
                     for s, e in zip(frame.seconds, frame.extrapolated)]
    frame["ratio"] = frame.ratio.map(lambda r: "" if r != r else f"{r:.3g}")
    frame["value"] = frame.value.map(lambda v: "" if v != v else f"{v:.6g}")
    frame["abs_diff"] = frame.abs_diff.map(lambda v: "" if v != v else f"{v:.1e}")
    display(frame[list(columns)].rename(columns={"abs_diff": "|difference|"}).style.hide(axis="index"))


def pick(table: pd.DataFrame, section: str, method: str, n=None) -> pd.Series:
    """The benchmark row of ``method`` in ``section`` at size ``n`` (default: the largest size it ran at)."""
    rows = table[(table.section == section) & (table.method == method)]
    return rows[rows.n == (n if n is not None else rows.n.max())].iloc[0]


def row(parallel: pd.DataFrame, section: str, starts: str) -> pd.Series:
    """The median over repeats of points, wall and CPU seconds and cores busy of the parallel benchmark's
    configuration starting with ``starts`` in ``section`` (NaNs when it was not run)."""
    rows = parallel[(parallel.section == section) & parallel.configuration.astype(str).str.startswith(starts)]
    columns = ["points", "wall_seconds", "cpu_seconds", "cpu_per_wall"]
    return rows[columns].astype(float).median() if len(rows) else pd.Series(float("nan"), index=columns)


def bench_constants(source: str) -> dict:
    """The module-level constants (``NAME = literal``) of a benchmark script's ``source``: the sizes it fixes but does
    not write into its table (``bench_metrics.SPHERE_DIM``, ``MEMORY_BATCH``)."""
    return {node.targets[0].id: ast.literal_eval(node.value) for node in ast.parse(source).body
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id.isupper() and isinstance(node.value, ast.Constant)}


def load_words(machine: dict) -> str:
    """Whether the one-minute load average recorded before and after the benchmark (``book.machine``, its
    ``metrics_machine.json``) stays within what its own torch threads account for, in words."""
    threads = machine.get("torch_threads") or machine.get("logical_cpus") or 1
    before, after = machine.get("load_average_before", [0])[0], machine.get("load_average_after", [0])[0]
    numbers = f"{before:.1f} before it started and {after:.1f} when it ended"
    if max(before, after) <= threads:
        return (f"{numbers}, no more than its own {threads} threads account for: consistent with a machine idle "
                "apart from the benchmark")
    return (f"{numbers}, more than its own {threads} threads account for: other work shared the CPUs, so the "
            "absolute times are inflated")


def profile_rows(table: pd.DataFrame, last: bool = True) -> pd.DataFrame:
    """The runs of ``benchmarks/bench_profile.py`` as the page shows them: the last one (the rows of the last row's
    date and note), or with ``last=False`` every run."""
    if last:
        end = table.iloc[-1]
        table = table[(table["date"] == end["date"]) & (table["note"].fillna("") == ("" if pd.isna(end["note"])
                                                                                     else end["note"]))]
    return table.assign(**{"goal": [goal_words("profile", r) for r in table["ratio"]]})[
        ["date", "model", "texts", "tokens", "bare_s", "profile_s", "ratio", "cpu_ratio", "goal", "gemm_all_gflops",
         "load_average", "note"]]
