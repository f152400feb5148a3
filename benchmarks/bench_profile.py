"""Benchmark of ``python -m anisotropy profile`` (issue 47): what the measurement costs on top of the model's bare
forward passes over the same tokens.

    .venv/bin/python benchmarks/bench_profile.py                  # smollm2-135m and mpnet-base-v2, 64 prose texts
    .venv/bin/python benchmarks/bench_profile.py --quick          # one small model, 16 texts, to check the script

For each model, with the model already loaded (loading is the same for both and is not what the goal is about):
  bare     the forward passes alone: the same texts, tokenised as taps tokenises them, in the same batches, with
           ``output_hidden_states=True`` and nothing done with the states;
  profile  ``experiments.model_profile.measure`` on the same loaded model and texts (both papers' measures), into
           nothing: no results store, so nothing is read back.
The goal (issue 47): profile / bare <= 1.3. Wall and CPU seconds are the best of ``--repeats``, the two taking
turns; the row carries the machine's calibration (``anisotropy.book.machine``: float32 GEMM GFLOP/s on one and on
every core), since machines of the same name differ 2-3x, and the work the ratio rests on: the float32 flops of
Paper 2's matrix products on every layer (``products_gflop``: TwoNN's Gram matrix and sigma_1's scatter per batch)
and the forward passes' 2 N per token (``forward_gflop``, N the parameters but the input embedding's), and the wall
seconds of those products alone (``products_s``, ``products_seconds``): bare + products_s is the least the profile,
as it measures, can take here. Writes
``results/profile.csv`` (appended, one row per model and run; a file with fewer columns is rewritten with them).
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from anisotropy.experiments import model_profile
from anisotropy.measure import twonn
from anisotropy.measure.rows import threads_each
from anisotropy.pages import budget

HERE = Path(__file__).resolve().parent
GOAL = 1.3
COLUMNS = ["date", "model", "texts", "tokens", "bare_s", "bare_cpu_s", "profile_s", "profile_cpu_s", "ratio",
           "cpu_ratio", "goal", "gemm_1core_gflops", "gemm_all_gflops", "threads", "load_average", "note",
           "products_gflop", "forward_gflop", "products_s"]


def _timed(fns, repeats: int) -> list[tuple[float, float]]:
    """Per function of ``fns``, (best wall seconds, CPU seconds of that run) of ``repeats`` calls, the functions taking
    turns (bare, profile, bare, profile, ...): a machine whose speed drifts (a shared host) then slows both alike."""
    best = [(float("inf"), float("inf"))] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            best[i] = min(best[i], (time.perf_counter() - wall, time.process_time() - cpu))
    return best


def bare_passes(loaded, texts, max_length: int, batch: int) -> int:
    """The forward passes alone; returns the number of tokens read."""
    tokens = 0
    with torch.inference_mode():
        for start in range(0, len(texts), batch):
            enc = loaded.preprocessor(texts[start:start + batch], padding=True, truncation=True,
                                      max_length=max_length, return_tensors="pt")
            loaded.model(**enc, output_hidden_states=True)
            tokens += int(enc["attention_mask"].sum())
    return tokens


def products_flops(frame) -> float:
    """The float32 flops of the matrix products of Paper 2's statistics in a profile (``frame``: its per-layer rows):
    per layer and batch, TwoNN's Gram matrix and sigma_1's scatter (``pages.budget.batch_metric_flops`` of the
    profile's metrics, without the robust readings it skips)."""
    return float(sum(r.spectral_n_batches * budget.batch_metric_flops(model_profile.PAPER2_METRICS,
                                                                      r.spectral_batch_size, r.dim, robust=False)[0]
                     for r in frame.itertuples()))


def products_seconds(frame, repeats: int) -> float:
    """Wall seconds of Paper 2's matrix products alone, best of ``repeats``: per layer and batch of the profile
    (``frame``), TwoNN's float32 Gram strips (``twonn.gram_strips``) and sigma_1's scatter, on random rows of the
    batch's shape, the layers taken as the profile takes them (``measure.rows.threads_each``). The profile's exact measures
    compute these products and more, so bare + this is the least the profile can take on this machine."""
    shapes = [(r.spectral_batch_size, r.dim, r.spectral_n_batches) for r in frame.itertuples()]

    def layer(shape) -> None:
        n, d, batches = shape
        x = torch.randn(n, d)
        for _ in range(batches):
            for s, e in twonn.gram_strips(n):
                torch.mm(x[s:e], x[s:].T)
            x.T @ x

    return _timed([lambda: threads_each(layer, shapes)], repeats)[0][0]


def body_params(model) -> int:
    """The parameters a token's forward pass multiplies by (2 flops each): all but the input embedding, a lookup."""
    return sum(p.numel() for p in model.parameters()) - model.get_input_embeddings().weight.numel()


def main(argv=None) -> int:
    from anisotropy.book import machine
    from anisotropy.data import sources
    from anisotropy.models import registry

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=["smollm2-135m", "mpnet-base-v2"])
    parser.add_argument("--texts", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="one small model, 16 texts, one repeat")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "profile.csv")
    parser.add_argument("--note", default="")
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.texts, args.repeats = args.models[:1], 16, 1

    texts = sources.load("prose", args.texts, seed=0)
    gemm_1, gemm_all = machine.gemm_gflops(1), machine.gemm_gflops(torch.get_num_threads())
    rows = []
    for name in args.models:
        loaded = registry.load_any(name)
        loaded.model = getattr(loaded.model, "base_model", loaded.model)
        tokens = bare_passes(loaded, texts, args.max_length, model_profile.EXTRACTION_BATCH)  # warm-up, and count
        frame = model_profile.measure(loaded, texts, max_length=args.max_length)  # warm-up, and its batches
        bare, prof = _timed([lambda: bare_passes(loaded, texts, args.max_length, model_profile.EXTRACTION_BATCH),
                             lambda: model_profile.measure(loaded, texts, max_length=args.max_length)], args.repeats)
        row = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "model": name, "texts": len(texts),
               "tokens": tokens, "bare_s": round(bare[0], 2), "bare_cpu_s": round(bare[1], 2),
               "profile_s": round(prof[0], 2), "profile_cpu_s": round(prof[1], 2),
               "ratio": round(prof[0] / bare[0], 2), "cpu_ratio": round(prof[1] / bare[1], 2), "goal": GOAL,
               "gemm_1core_gflops": round(gemm_1), "gemm_all_gflops": round(gemm_all),
               "threads": torch.get_num_threads(), "load_average": round(os.getloadavg()[0], 2), "note": args.note,
               "products_gflop": round(products_flops(frame) / 1e9, 1),
               "forward_gflop": round(2 * body_params(loaded.model) * tokens / 1e9, 1),
               "products_s": round(products_seconds(frame, args.repeats), 2)}
        print(", ".join(f"{k}={v}" for k, v in row.items()))
        rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    new = not args.out.is_file()
    old = []
    if not new:
        with open(args.out, newline="") as stream:
            old = list(csv.DictReader(stream))
    if old and list(old[0]) != COLUMNS:  # older rows: the new columns empty
        with open(args.out, "w", newline="") as stream:
            writer = csv.DictWriter(stream, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(old)
    with open(args.out, "a", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=COLUMNS)
        if new:
            writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
