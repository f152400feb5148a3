"""What a page and the ``plan`` command show of plans: a chapter's Colab budget (``table``), its sentences
(``describe``, ``summary``, ``other_gpus``), and the plan of many chapters part by part (``plan_rows``, worded by
``plan_table`` in ``PLAN_COLUMNS``)."""
from __future__ import annotations

import pandas as pd

from anisotropy.data import sources as data
from anisotropy.models import registry
from anisotropy.pages.budget.parts import Part, estimate, gib_text, minutes_text, parts, problems, with_article
from anisotropy.pages.budget.requests import Plan
from anisotropy.pages.budget.runtimes import COLAB, FREE_GPU, GPUS, HOST_RAM_LIMIT_GIB, RUNTIME_GIB, RUNTIMES, Runtime


def table(p: Plan):
    """The page's Colab budget of plan ``p``: one row per quantity, value and what a free Colab runtime offers (the
    time on a T4, and on the paid runtimes' L4 and A100 in one row). Sizes that leave out a model of unknown size read
    "at least"; a row names those models."""
    e = estimate(p)
    low = "at least " if e["unknown"] else ""
    rows = [("checkpoints loaded", f"{e['checkpoints']}", ""),
            ("download (models and data)", low + gib_text(e["download_gib"]), ""),
            ("disk at the peak" + (" (with hf-xet's chunk cache)" if e["xet_gib"] else ""),
             low + gib_text(e["disk_gib"]), f"{COLAB['disk'] - COLAB['system_disk']:.0f} GiB free"),
            ("GPU memory at the peak", low + gib_text(e["gpu_gib"]), f"{COLAB['gpu']:.0f} GiB (T4)"),
            ("host memory at the peak", low + gib_text(e["ram_gib"]), f"{HOST_RAM_LIMIT_GIB:.1f} GiB"),
            ("time on a T4" + (" (with training)" if e["training_minutes"] else ""), minutes_text(e["gpu_minutes"]),
             f"over sessions: {e['parts']} part{'s' if e['parts'] != 1 else ''}, each stored as it ends"),
            ("longest part on a T4", minutes_text(e["longest_part_minutes"]),
             f"{COLAB['session_hours']:g} h a part (a free session, to be safe)"),
            ("time on " + " / ".join(with_article(k) for k in GPUS if k != e["gpu"]), other_gpus(e, sep=" / "),
             "paid Colab runtimes")]
    if e["training_minutes"]:
        suites = f" ({', '.join(p.trained)} suite{'s' if len(p.trained) > 1 else ''})" if p.trained else ""
        rows.append(("of which training" + suites, minutes_text(e["training_minutes"]),
                     "less if checkpoint_suites trained them in this runtime" if p.trained else ""))
    if e["metric_minutes"]:
        rows.append(("of which metrics", minutes_text(e["metric_minutes"]),
                     "on the GPU: scatter products, float64 top eigenvalues" + (", TwoNN" if any(
                         "twonn_dimension" in c.metrics for c in p.checkpoints) else "")))
    if p.reused_from:
        rows.append(("reused when they ran in this runtime", ", ".join(p.reused_from),
                     "then nothing above is downloaded or measured again"))
    if e["unknown"]:
        rows.append(("size unknown (not counted)", ", ".join(e["unknown"]), ""))
    return pd.DataFrame(rows, columns=["quantity", "estimate", "free Colab"])


def other_gpus(e: dict, sep: str = ", ") -> str:
    """The estimate ``e``'s time on every kind of ``GPUS`` but its own, e.g. "L4 14.8 min, A100 9.6 min" (with
    ``sep`` " / ": "14.8 min / 9.6 min", the kinds named elsewhere)."""
    others = [k for k in GPUS if k != e["gpu"]]
    if sep == ", ":
        return sep.join(f"{k} {minutes_text(e['minutes_by_gpu'][k])}" for k in others)
    return sep.join(minutes_text(e["minutes_by_gpu"][k]) for k in others)


def describe(p: Plan) -> str:
    """What the chapter of plan ``p`` measures from the Hub, in words: hub ids (with their number of revisions) and
    the data, e.g. "the pretrained bert-base-uncased and gpt2 on 2,000 examples of WikiText-103 ..."."""
    counts: dict[str, int] = {}
    for c in p.checkpoints:
        counts[c.model] = counts.get(c.model, 0) + 1
    names = [f"{registry.spec(m).hub_id}" + (f" ({k} checkpoints)" if k > 1 else "") for m, k in counts.items()]
    used = [f"{n:,} examples of {data.SOURCES[s].description}" for s, n in dict.fromkeys(p.data) if n
            and s in data.SOURCES]
    if not names:
        return p.notes[0] if p.notes else "no pretrained model"
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    text = f"the pretrained {listed}" + (f" on {' and '.join(used)}" if used else "")
    if p.reused_from:
        return (f"reuses the measurements of {', '.join(p.reused_from)} when they ran in this runtime (same models, "
                f"same data); on a fresh runtime it measures {text}")
    return text


def summary(p: Plan) -> str:
    """One sentence for the narrative: what the chapter of plan ``p`` downloads, how long it takes on a T4 (training
    included; on the other kinds of ``GPUS`` in brackets) and its host memory, or why it does not fit."""
    e = estimate(p)
    if not p.checkpoints and not p.runs:
        issues = problems(p, e)
        return ("it downloads no model" + (f" ({p.notes[0]})" if p.notes else "")
                + (f"; it does not fit a free Colab as set ({'; '.join(issues)})" if issues else ""))
    t4 = f"about {minutes_text(e['gpu_minutes'])}"
    if not p.checkpoints and not p.work:
        text = f"{t4} of training on a Colab T4 ({other_gpus(e)}) and {gib_text(e['download_gib'])} of data"
    elif not p.checkpoints:
        text = (f"{t4} on a Colab T4 ({other_gpus(e)}), {minutes_text(e['training_minutes'])} of it training, "
                f"the rest its own computations, and {gib_text(e['download_gib'])} of data")
    else:
        training = f", {minutes_text(e['training_minutes'])} of it training" if e["training_minutes"] else ""
        text = (f"{t4} on a Colab T4 ({other_gpus(e)}){training}, {e['checkpoints']} checkpoint"
                f"{'s' if e['checkpoints'] != 1 else ''}, {'at least ' if e['unknown'] else ''}"
                f"{gib_text(e['download_gib'])} of downloads and {gib_text(e['ram_gib'])} of host memory at the peak")
    if p.reused_from:
        text += (f" on a fresh runtime (none when {', '.join(p.reused_from)} ran in this runtime: their stored "
                 f"measurements are reused)")
    issues = problems(p, e)
    return text + (f"; it does not fit a free Colab as set ({'; '.join(issues)})" if issues else "")


# ---- the plan of many chapters, part by part (``python -m anisotropy plan``, the book's table) -------------------------

PLAN_COLUMNS = ["chapter", "part", "parts", "download", "disk", "GPU memory", "host memory",
                *[f"{k} per part" for k in (FREE_GPU,)], *[f"{k} in all" for k in GPUS]]


def plan_rows(plans, rt: Runtime | None = None) -> list[dict]:
    """One row per group of like parts of each plan in ``plans`` (a model's revisions, a suite's seeds), then one row
    per chapter ("all parts": its ``estimate``: downloads, disk at the peak, the largest memories, the time of all its
    parts), then one for every chapter together: numbers (GiB, minutes), for ``plan_table`` to word. ``rt``: the
    runtime whose memory a part is measured against (host memory with the device's on a runtime without a GPU)."""
    rt = rt or RUNTIMES["colab-t4"]
    rows, totals = [], []
    for p in plans:
        groups: dict[str, list[Part]] = {}
        for part in parts(p):
            groups.setdefault(part.group, []).append(part)
        for group, members in groups.items():
            rows.append({"chapter": p.chapter, "part": members[0].name if len(members) == 1 else group,
                         "parts": len(members), "download": sum(m.download_gib for m in members),
                         "disk": max(m.disk_gib for m in members),
                         "GPU memory": max(m.gpu_gib for m in members) if rt.gpu else 0.0,
                         "host memory": max(m.ram_gib if rt.gpu else m.cpu_ram_gib for m in members),
                         f"{FREE_GPU} per part": max(m.minutes[FREE_GPU] * m.at_once for m in members),
                         **{f"{k} in all": sum(m.minutes[k] for m in members) for k in GPUS}})
        e = estimate(p)
        total = {"chapter": p.chapter, "part": "all parts", "parts": e["parts"], "download": e["download_gib"],
                 "disk": e["disk_gib"], "GPU memory": e["gpu_gib"] if rt.gpu else 0.0,
                 "host memory": max([r["host memory"] for r in rows if r["chapter"] == p.chapter] or [RUNTIME_GIB]),
                 f"{FREE_GPU} per part": e["longest_part_minutes"],
                 **{f"{k} in all": e["minutes_by_gpu"][k] for k in GPUS}}
        rows.append(total)
        totals.append(total)
    if len(totals) > 1:
        rows.append({"chapter": "every chapter", "part": "all parts", "parts": sum(t["parts"] for t in totals),
                     "download": sum(t["download"] for t in totals), "disk": max(t["disk"] for t in totals),
                     "GPU memory": max(t["GPU memory"] for t in totals),
                     "host memory": max(t["host memory"] for t in totals),
                     f"{FREE_GPU} per part": max(t[f"{FREE_GPU} per part"] for t in totals),
                     **{f"{k} in all": sum(t[f"{k} in all"] for t in totals) for k in GPUS}})
    return rows


def plan_table(plans, rt: Runtime | None = None) -> pd.DataFrame:
    """``plan_rows`` worded: sizes in MiB or GiB, times in minutes or hours (``minutes_text``), one column per
    ``PLAN_COLUMNS``; what the ``plan`` command prints and the book shows."""
    shown = []
    for row in plan_rows(plans, rt):
        shown.append({"chapter": row["chapter"], "part": row["part"], "parts": f"{row['parts']:,}",
                      "download": gib_text(row["download"]) if row["download"] else "-",
                      "disk": gib_text(row["disk"]) if row["disk"] else "-",
                      "GPU memory": gib_text(row["GPU memory"]) if row["GPU memory"] else "-",
                      "host memory": gib_text(row["host memory"]),
                      **{c: minutes_text(row[c]) if row[c] else "-" for c in PLAN_COLUMNS[7:]}})
    return pd.DataFrame(shown, columns=PLAN_COLUMNS)
