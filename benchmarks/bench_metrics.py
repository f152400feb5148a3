"""Benchmark of anisotropy.measure.metrics: every ratio is measured side by side in one run, on one machine.

    .venv/bin/python benchmarks/bench_metrics.py            # full run (several minutes), writes benchmarks/results/
    .venv/bin/python benchmarks/bench_metrics.py --quick    # small sizes, seconds, for checking the script

Sections (goals from issue 3; the book judges them with anisotropy.chapters.appendix_performance.GOALS):
  mean_cosine  exact streaming mean cosine vs numpy merely summing the array (goal: within 2x), vs a naive float64
               conversion, vs the paper's pair sampling (at stderr 1e-3, and extrapolated to the exact method's
               error), vs brute force all pairs (extrapolated from a slab of rows beyond n = 10^4).
  twonn        ours vs scikit-dimension vs DADApy, against the bound of one float32 n x n x d product
               (goal: within 1.5x of the bound, estimates agreeing within 2%).
  sigma1       sigma1 share from the streamed float64 covariance (LayerStats) vs a full SVD.
  memory       peak resident memory of LayerStats fed n rows in batches, each n in a fresh process.
Times are the best of a few repeats (perf_counter); on a shared machine they are inflated by contention, so only
ratios measured in the same run mean anything.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from anisotropy.measure import metrics as M
from anisotropy.measure import twonn  # the owners of the private helpers tested

HERE = Path(__file__).resolve().parent
SPHERE_DIM = 12  # TwoNN's data lie on a sphere of this dimension (SPHERE_DIM + 1 coordinates), its true dimension
MEMORY_BATCH = 4096  # rows per LayerStats.update in the memory runs
COLUMNS = ["section", "n", "d", "method", "seconds", "ratio", "ratio_to", "value", "abs_diff", "extrapolated", "note"]


def best_time(fn, repeats: int):
    """(best wall time in seconds, last result)."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def drifted_gaussian(n: int, d: int, drift: float, seed: int) -> np.ndarray:
    """float32 N(0, I) + drift * 1, generated in chunks so that 10^6 x 768 never needs a float64 copy."""
    g = np.random.default_rng(seed)
    x = np.empty((n, d), dtype=np.float32)
    step = 1 << 16
    for s in range(0, n, step):
        g.standard_normal(out=x[s:s + step], dtype=np.float32)
    x += np.float32(drift)
    return x


def float64_mean_cosine(x: np.ndarray) -> float:
    """The naive way: convert each chunk to float64, normalise, sum. Also the reference value."""
    total = np.zeros(x.shape[1])
    for s in range(0, len(x), 1 << 14):
        c = x[s:s + (1 << 14)].astype(np.float64)
        total += (c / np.linalg.norm(c, axis=1, keepdims=True)).sum(axis=0)
    n = len(x)
    return float((total @ total - n) / (n * (n - 1)))


def brute_force_rows(x: torch.Tensor, rows: int) -> float:
    """Sum of cosines between the first ``rows`` rows and all n rows (float32 Gram in 1024-row blocks, each block
    divided by the norms, so that no normalised copy of the whole array is made)."""
    inv = torch.linalg.vector_norm(x, dim=1).reciprocal()
    total = 0.0
    for s in range(0, rows, 1024):
        e = min(rows, s + 1024)
        block = (x[s:e] @ x.T).mul_(inv[s:e, None]).mul_(inv[None, :])
        total += float(block.sum(dtype=torch.float64))
    return total


def bench_mean_cosine(sizes, d, repeats, rows_out, brute_budget):
    for n in sizes:
        x = drifted_gaussian(n, d, drift=0.25, seed=n)
        xt = torch.from_numpy(x)
        reps = repeats if n <= 100_000 else max(1, repeats - 1)
        t_sum, _ = best_time(lambda: x.sum(axis=0), reps)
        t_ours, ours = best_time(lambda: M.mean_cosine(x), reps)
        t_naive, ref = best_time(lambda: float64_mean_cosine(x), 1)
        err = abs(ours - ref)
        base = dict(section="mean_cosine", n=n, d=d, ratio_to="numpy_sum")
        rows_out.append({**base, "method": "numpy_sum", "seconds": t_sum, "ratio": 1.0,
                         "note": "x.sum(axis=0) on the float32 array"})
        rows_out.append({**base, "method": "ours_exact", "seconds": t_ours, "ratio": t_ours / t_sum, "value": ours,
                         "abs_diff": err, "note": "float32 chunks, float64 accumulation; abs_diff vs float64"})
        rows_out.append({**base, "method": "float64_naive", "seconds": t_naive, "ratio": t_naive / t_sum,
                         "value": ref, "abs_diff": 0.0, "note": "convert to float64, normalise, sum (reference)"})
        # The paper's estimator: pilot for the per-pair spread, then enough pairs for stderr 1e-3.
        pilot = M.sampled_pair_cosine(x, n_pairs=4000, seed=1)
        sd = pilot.stderr * np.sqrt(4000)
        pairs = int(np.ceil((sd / 1e-3) ** 2))
        t_pairs, est = best_time(lambda: M.sampled_pair_cosine(x, n_pairs=pairs, seed=2), reps)
        rows_out.append({**base, "method": "pairs_stderr_1e-3", "seconds": t_pairs, "ratio": t_pairs / t_sum,
                         "value": est.mean, "abs_diff": abs(est.mean - ref),
                         "note": f"{pairs} uniform pairs (stderr {est.stderr:.1e})"})
        # Matched accuracy: pairs for a standard error equal to the exact method's error, cost linear in pairs.
        matched = (sd / max(err, 1e-12)) ** 2
        t_matched = t_pairs / pairs * matched
        rows_out.append({**base, "method": "pairs_matched_accuracy", "seconds": t_matched, "ratio": t_matched / t_sum,
                         "extrapolated": True,
                         "note": f"{matched:.1e} pairs for stderr {err:.1e} (linear in pairs from the run above)"})
        # Brute force: all n x n cosines. Measured on a slab of rows when n^2 d is beyond the budget, then scaled.
        slab = n if n * n <= brute_budget else max(256, brute_budget // n)
        t_slab, s = best_time(lambda: brute_force_rows(xt, slab), 1)
        t_brute = t_slab * n / slab
        value = (s - slab) / (slab * (n - 1)) if slab == n else float("nan")
        rows_out.append({**base, "method": "brute_force_all_pairs", "seconds": t_brute, "ratio": t_brute / t_sum,
                         "value": value, "abs_diff": abs(value - ref) if slab == n else float("nan"),
                         "extrapolated": slab < n, "note": f"float32 Gram; {slab} of {n} rows timed"})
        print_section(rows_out, "mean_cosine", n)
        x = xt = None  # free both before the next size's arrays (the lambdas above read them by name)


def hidden_state_like(n: int, d: int, seed: int) -> np.ndarray:
    """A SPHERE_DIM-sphere of radius 10 rotated into d dimensions, plus small isotropic noise and a drift of norm ~ 80."""
    g = np.random.default_rng(seed)
    z = g.standard_normal((n, SPHERE_DIM + 1))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    q, _ = np.linalg.qr(g.standard_normal((d, SPHERE_DIM + 1)))
    return (10 * z @ q.T + 0.05 * g.standard_normal((n, d)) + 3.0).astype(np.float32)


def gram_bound(x: torch.Tensor) -> None:
    """One float32 n x n x d product, in the same row blocks as ours (the blocks keep memory bounded)."""
    n = x.shape[0]
    block = max(1, min(n, twonn._GRAM_BLOCK_ENTRIES // n))
    for s in range(0, n, block):
        x[s:s + block] @ x.T


def bench_twonn(sizes, d, repeats, rows_out, skip_skdim_above):
    import skdim
    from dadapy import Data

    for n in sizes:
        x = hidden_state_like(n, d, seed=n)
        xt = torch.from_numpy(x)
        t_bound, _ = best_time(lambda: gram_bound(xt), repeats)
        t_ours, ours = best_time(lambda: M.twonn_dimension(x), repeats)
        base = dict(section="twonn", n=n, d=d, ratio_to="float32_gram_bound")
        rows_out.append({**base, "method": "float32_gram_bound", "seconds": t_bound, "ratio": 1.0,
                         "note": "one float32 n x n x d product (torch, row blocks)"})
        rows_out.append({**base, "method": "ours", "seconds": t_ours, "ratio": t_ours / t_bound, "value": ours,
                         "abs_diff": 0.0, "note": "centred float32 Gram + exact float64 re-measure"})
        if skip_skdim_above is None or n <= skip_skdim_above:
            t_sk, sk = best_time(lambda: skdim.id.TwoNN().fit(x).dimension_, 1)
            rows_out.append({**base, "method": "scikit-dimension", "seconds": t_sk, "ratio": t_sk / t_bound,
                             "value": sk, "abs_diff": abs(sk - ours), "note": "skdim.id.TwoNN().fit(x)"})
        t_da, da = best_time(lambda: Data(x.astype(np.float64), verbose=False).compute_id_2NN()[0], 1)
        rows_out.append({**base, "method": "dadapy", "seconds": t_da, "ratio": t_da / t_bound, "value": da,
                         "abs_diff": abs(da - ours), "note": "Data(x).compute_id_2NN()"})
        print_section(rows_out, "twonn", n)


def bench_sigma1(n, d, rows_out):
    scales = (1.0 / np.sqrt(np.arange(1, d + 1))).astype(np.float32)
    x = drifted_gaussian(n, d, drift=2.0, seed=7) * scales + scales  # a decaying spectrum and a drift

    def streamed():
        s = M.LayerStats(d, reservoir_size=0)
        for b in range(0, n, 4096):
            s.update(x[b:b + 4096])
        return s.sigma1_share

    def full_svd():
        c = x.astype(np.float64)
        c -= c.mean(axis=0)
        sv = np.linalg.svd(c, compute_uv=False)
        return float(sv[0] ** 2 / np.sum(sv**2))

    t_svd, ref = best_time(full_svd, 1)
    t_stream, val = best_time(streamed, 1)
    t_one, one = best_time(lambda: M.sigma1_share(x), 1)
    base = dict(section="sigma1", n=n, d=d, ratio_to="full_svd_float64")
    rows_out.append({**base, "method": "full_svd_float64", "seconds": t_svd, "ratio": 1.0, "value": ref,
                     "abs_diff": 0.0, "note": "numpy.linalg.svd of the centred float64 matrix"})
    rows_out.append({**base, "method": "layerstats_streamed", "seconds": t_stream, "ratio": t_stream / t_svd,
                     "value": val, "abs_diff": abs(val - ref),
                     "note": "LayerStats.update in batches of 4096 (same arithmetic as below)"})
    rows_out.append({**base, "method": "sigma1_share_one_shot", "seconds": t_one, "ratio": t_one / t_svd,
                     "value": one, "abs_diff": abs(one - ref),
                     "note": "float32 products of centred chunks, float64 accumulation, top eigenvalue"})
    print_section(rows_out, "sigma1", n)


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def memory_child(n: int, d: int) -> None:
    """Run in a fresh process: feed n rows to a LayerStats in batches of MEMORY_BATCH, print the peak RSS growth.

    The peak is the kernel's high-water mark (VmHWM), reset just before the loop (``echo 5 > /proc/self/clear_refs``)
    so that import-time spikes do not hide the loop's own peak; the baseline is the RSS at that moment.
    """
    batch = MEMORY_BATCH
    g = np.random.default_rng(0)
    s = M.LayerStats(d, reservoir_size=2048)
    buf = np.empty((batch, d), dtype=np.float32)
    g.standard_normal(out=buf, dtype=np.float32)
    s.update(buf[:16])  # touch every code path once before the baseline
    try:
        Path("/proc/self/clear_refs").write_text("5")
        base, how = _status_mib("VmRSS"), "VmHWM"
    except OSError:  # no reset available: fall back to the lifetime peak
        base, how = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "ru_maxrss"
    t = time.perf_counter()
    for start in range(0, n, batch):
        g.standard_normal(out=buf, dtype=np.float32)
        s.update(buf[: min(batch, n - start)])
    seconds = time.perf_counter() - t
    row = s.as_dict()  # includes TwoNN on the reservoir
    peak = _status_mib("VmHWM") if how == "VmHWM" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"baseline_mib": base, "peak_mib": peak, "seconds": seconds, "n": row["n"], "how": how}))


def bench_memory(sizes, d, rows_out):
    for n in sizes:
        out = subprocess.run([sys.executable, __file__, "--memory-child", str(n), str(d)],
                             check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        rows_out.append(dict(section="memory", n=n, d=d, method="layerstats_peak_rss_growth", seconds=r["seconds"],
                             value=r["peak_mib"] - r["baseline_mib"], ratio_to="",
                             note=f"peak MiB above the {r['baseline_mib']:.0f} MiB baseline ({r['how']}); the rows "
                                  f"themselves would be {n * d * 4 / 2**20:.0f} MiB in float32"))
        print_section(rows_out, "memory", n)


def print_section(rows, section, n):
    frame = pd.DataFrame([r for r in rows if r["section"] == section and r["n"] == n])
    cols = [c for c in ["section", "n", "method", "seconds", "ratio", "value", "abs_diff", "note"] if c in frame]
    print(frame[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"), flush=True)
    print()


def machine_info(started: float, load_before) -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gib = float("nan")
    from importlib.metadata import PackageNotFoundError, version

    def ver(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return {
        "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "memory_gib": round(mem_gib, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": {name: ver(name) for name in ("numpy", "torch", "scipy", "scikit-dimension", "dadapy")},
        "load_average_before": [round(v, 2) for v in load_before],
        "load_average_after": [round(v, 2) for v in os.getloadavg()],
        "wall_minutes": round((time.perf_counter() - started) / 60, 1),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes (seconds), for checking the script")
    p.add_argument("--skip-skdim-above", type=int, default=None,
                   help="skip scikit-dimension for n above this (it is slow at 16384 x 768)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=HERE / "results" / "metrics.csv")
    p.add_argument("--machine-out", type=Path, default=None, help="default: <out folder>/metrics_machine.json")
    p.add_argument("--note", default="", help="free text stored in the machine file (e.g. how loaded the CPU was)")
    p.add_argument("--memory-child", nargs=2, type=int, metavar=("N", "D"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.memory_child:
        memory_child(*args.memory_child)
        return

    d = 768
    if args.quick:
        cos_sizes, twonn_sizes, sigma_n, mem_sizes = [10_000], [1024], 10_000, [10_000, 40_000]
        brute_budget = 10**8
    else:
        cos_sizes, twonn_sizes, sigma_n = [10**4, 10**5, 10**6], [4096, 16384], 100_000
        mem_sizes = [10**4, 10**5, 10**6]
        brute_budget = 10**8
    started, load_before = time.perf_counter(), os.getloadavg()
    rows: list[dict] = []
    bench_mean_cosine(cos_sizes, d, args.repeats, rows, brute_budget)
    bench_twonn(twonn_sizes, d, args.repeats, rows, args.skip_skdim_above)
    bench_sigma1(sigma_n, d, rows)
    bench_memory(mem_sizes, d, rows)

    frame = pd.DataFrame(rows).reindex(columns=COLUMNS)
    frame["extrapolated"] = frame["extrapolated"].fillna(False).astype(bool)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out, index=False, float_format="%.6g")
    info = machine_info(started, load_before)
    info["note"] = args.note
    info["command"] = "python benchmarks/bench_metrics.py " + " ".join(argv if argv is not None else sys.argv[1:])
    machine_out = args.machine_out or args.out.parent / "metrics_machine.json"
    machine_out.write_text(json.dumps(info, indent=2) + "\n")
    print(f"wrote {args.out} and {machine_out}")


if __name__ == "__main__":
    main()
