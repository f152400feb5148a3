"""The performance appendix: the committed benchmark tables (``benchmarks/results``) as the page shows them, and a
chapter's Colab budget worked term by term (``worked``)."""

from __future__ import annotations

import ast

import pandas as pd
from IPython.display import display

from anisotropy import profiles
from anisotropy.chapters import plans
from anisotropy.measure.eigen import TOP_EIGENVALUE_REL_TOL  # noqa: F401 - the page states the share's accuracy
from anisotropy.models import registry
from anisotropy.pages import budget

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
    date and note), or with ``last=False`` every run; ``products``: the float32 flops of Paper 2's matrix products over
    the forward passes'; ``floor``: 1 + the products' own seconds over the bare passes', the least ratio the profile's
    measures allow on that machine (NaN for runs that did not record them)."""
    if last:
        end = table.iloc[-1]
        table = table[(table["date"] == end["date"]) & (table["note"].fillna("") == ("" if pd.isna(end["note"])
                                                                                     else end["note"]))]
    share = (table["products_gflop"] / table["forward_gflop"]) if "products_gflop" in table else float("nan")
    floor = (1 + table["products_s"] / table["bare_s"]) if "products_s" in table else float("nan")
    return table.assign(**{"goal": [goal_words("profile", r) for r in table["ratio"]], "products": share,
                           "floor": floor})[
        ["date", "model", "texts", "tokens", "bare_s", "profile_s", "ratio", "cpu_ratio", "goal", "products", "floor",
         "gemm_all_gflops", "load_average", "note"]]


def worked(p: budget.Plan, gpu: str = budget.FREE_GPU):
    """``budget.estimate``'s time of plan ``p`` on the ``gpu`` kind of ``budget.GPUS``, term by term from the model
    sizes, as a table whose ``minutes`` add up to its ``gpu_minutes``: per model (its checkpoints together) the forward
    passes, 2 x parameters x tokens flops at the dtype's peak rate x ``EFFICIENCY`` (tokens = examples x positions x
    passes); the per-batch metrics (``checkpoint_metric_flops``); then the downloads at ``HUB_MB_PER_S``, the loads at
    ``LOAD_S`` each, the training (at its precision's rate, with its data's preparation) and what the chapter
    computes itself. Columns: term, model, parameters, tokens, TFLOP, rate (TFLOP/s, the peak), minutes."""
    kind, seconds = budget.GPUS[gpu], budget.gpu_seconds
    rows = []
    by_model: dict[tuple[str, str], list[budget.Checkpoint]] = {}
    for c in p.checkpoints:
        by_model.setdefault((c.model, c.dtype), []).append(c)
    for (model, dtype), group in by_model.items():
        flop = sum(budget.forward_flops(c) for c in group)
        rows.append({"term": f"forward passes ({dtype})" + (f", {len(group)} checkpoints" if len(group) > 1 else ""),
                     "model": model, "parameters": float(registry.spec(model).n_params or 0),
                     "tokens": sum(c.examples * c.positions * c.passes for c in group), "TFLOP": flop / 1e12,
                     "rate (TFLOP/s)": kind.rate(dtype), "minutes": seconds(flop, dtype, gpu) / 60})
        f32, f64 = (sum(x) for x in zip(*(budget.checkpoint_metric_flops(c) for c in group)))
        if f32 or f64:
            rows.append({"term": "per-batch metrics (float32 products, float64 eigenvalues)", "model": model,
                         "parameters": None, "tokens": None, "TFLOP": (f32 + f64) / 1e12, "rate (TFLOP/s)": None,
                         "minutes": (seconds(f32, "float32", gpu) + seconds(f64, "float64", gpu)) / 60})
    e = budget.estimate(p, gpu)
    rate, load_s, n_loads = budget.HUB_MB_PER_S, budget.LOAD_S, sum(c.passes for c in p.checkpoints)
    rows.append({"term": f"downloads, {e['download_gib']:.1f} GiB at {rate:.0f} MB/s",
                 "minutes": e["download_gib"] * 1024 / rate / 60})
    rows.append({"term": f"loads, {n_loads} at {load_s:.0f} s", "minutes": load_s * n_loads / 60})
    if e["training_minutes"]:
        precisions = sorted({budget.precision(r.recipe) for r in p.runs})
        rows.append({"term": f"training ({', '.join(precisions)}), with its data's preparation",
                     "TFLOP": p.training_flops / 1e12,
                     "rate (TFLOP/s)": kind.rate(precisions[0]) if len(precisions) == 1 else None,
                     "minutes": e["training_minutes"]})
    if e["work_tflop"] or any(w.cpu_seconds for w in p.work):
        work = sum(part.minutes[gpu] for part in budget.parts(p) if part.kind == "compute")
        rows.append({"term": "the chapter's own computations", "TFLOP": e["work_tflop"], "minutes": work})
    return pd.DataFrame(rows, columns=["term", "model", "parameters", "tokens", "TFLOP", "rate (TFLOP/s)", "minutes"])


def paper_plan(profile: str = "paper") -> dict:
    """The plan of every chapter under ``profile``, part by part, as ``python -m anisotropy plan --profile paper``
    prints it (``pages.budget.plan_table`` of ``chapters.plans.profile_plans``, in the book's chapter order): ``table``
    (worded), ``rows`` (the numbers), ``problems`` (chapter -> what does not fit, ``chapters.plans.problems``),
    ``runtime`` (the runtime in words)."""
    order = profiles.chapters()
    found = plans.profile_plans(profile, order)
    rt = budget.runtime(profile)
    return {"table": budget.plan_table(found, rt), "rows": budget.plan_rows(found, rt),
            "problems": {p.chapter: plans.problems(p.chapter, plans.parameters(p.chapter, profile), profile)
                         for p in found},
            "runtime": plans.runtime_words(profile)}


def plan_words(plan: dict) -> dict:
    """What the page says of ``paper_plan``'s plan: ``parts`` (their number), ``t4_hours`` (every part on a T4, one
    after another), ``longest`` (the longest part's time and chapter), ``fits`` (whether every part fits, in words)."""
    rows = plan["rows"]
    chapters = [r for r in rows if r["part"] == "all parts" and r["chapter"] != "every chapter"]
    every = next(r for r in rows if r["chapter"] == "every chapter")
    longest = max(chapters, key=lambda r: r[f"{budget.FREE_GPU} per part"])
    failing = {c: lines for c, lines in plan["problems"].items() if lines}
    return {"parts": every["parts"], "t4_hours": every[f"{budget.FREE_GPU} in all"] / 60,
            "longest": f"{budget.minutes_text(longest[f'{budget.FREE_GPU} per part'])} ({longest['chapter']})",
            "fits": "every part fits" if not failing else
                    f"{sum(len(v) for v in failing.values())} problem(s) in {len(failing)} chapter(s) "
                    f"({', '.join(failing)}) keep it from fitting"}
