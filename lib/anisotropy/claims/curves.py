"""One way to read a curve: a measure along training (or across depth), read from the end of its run's warm-up, with
intervals, and its shape named by a fit over the whole curve, never by one point, one end or one maximum. Every rule
that reads a trend goes through here, and its docstring names the shape it reads.

The curve
    ``Curve(x, y, draws)``: the points in x order (training steps, or relative depth), the measure at each, and the
    same curve redrawn ``DRAWS`` times by a bootstrap over what each point averages (``of_frame``: the batches, seeds
    or heads behind a point, or, where a frame keeps only a point's mean and standard deviation over ``n_batches``
    batches, its mean redrawn from its standard error). ``after_warmup`` and ``growth_start`` cut one run's rows at
    the end of its learning-rate warm-up; ``warmup_steps`` is the warm-up of every checkpoint series the book follows.

The shapes (two points are too few for any)
    ``trend``     monotone rise (or fall): Spearman's rho against x with its Bonett-Wright interval
                  (``spearman_interval``), and the share of the gain kept at the end; ``rises`` decides it.
    ``peak``      rise-then-fall: the best unimodal (up-then-down) least-squares fit against the best monotone one
                  (their SSE ratio), the fitted peak's location with its bootstrap interval, the fitted rise and fall;
                  ``rises_then_falls`` decides it, the rise and the fall on the whole curve and on the curve without
                  each of its points in turn (a single spike is no rise-then-fall).
    ``plateau``   the last third of the points: its level, lowest and highest values.
    ``bell``      over depth: the mean of the middle layers (``MIDDLE`` of relative depth) over the mean of the higher
                  end (first and last ``ENDS`` of depth), with its bootstrap interval; the three region means also
                  give a profile's top and spread (``Bell.top``, ``Bell.spread``); ``is_bell`` decides it.

A shape's verdict is None (undecided) where its points are too few, where the interval of the statistic that decides
it straddles the threshold (within the noise of the batches), and, for a rise, where the interval of its rank
correlation includes 0 (too few points to tell the order from chance).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

LEVEL = 0.95  # of every interval
DRAWS = 200  # bootstrap redraws of a curve
TOO_FEW = 2  # a curve of this many points or fewer has no shape
MIDDLE = (0.2, 0.8)  # "the middle layers" (Paper 2, Figure 1): the interior three fifths of relative depth
ENDS = 0.2  # the two ends of a profile: its first and its last fifth of relative depth

# ---- the warm-up of each checkpoint series --------------------------------------------------------------------------

#: MultiBERTs follow BERT's recipe: 10,000 warm-up steps (Sellam et al., 2022).
MULTIBERTS_WARMUP = 10_000
#: Pythia: "warmup": 0.01 of "train-iters": 143000 in every size's config (github.com/EleutherAI/pythia, models/*/
#: pythia-*.yml at 2d89850), 1,430 steps. BLOOM's smaller models: --lr-warmup-samples 183_105 (375M tokens) with the
#: batch ramping up from 192 sequences (bigscience-workshop/bigscience, train/tr11-176B-ml/smaller_models/tr11[c-f]-*-ml
#: .slurm at 1e8c57d), so at most 954 steps: before the first intermediate checkpoint (global_step1000).
SERIES_WARMUP = {"multiberts": MULTIBERTS_WARMUP, "pythia": 1_430, "bloom": 954}


def warmup_steps(source: str, profile: str = "local") -> int | None:
    """The learning-rate warm-up (steps) of a checkpoint series: a registry name of MultiBERTs, Pythia or Bloom (or
    those words), else the recipe's of a self-trained suite of ``profile``; None where unknown (a folder)."""
    for series, steps in SERIES_WARMUP.items():
        if str(source).startswith(series):
            return steps
    # cost: pulls torch (~1.2 s) into the claims ledger, which reads stored numbers only
    from anisotropy.training import recipes

    try:
        return int(recipes.suite(str(source), profile)[0].warmup)
    except KeyError:
        return None


def after_warmup(part: pd.DataFrame) -> pd.DataFrame:
    """One run's rows from its first checkpoint at or after its warm-up (column ``warmup``, steps) on; empty when
    the warm-up is unknown or no checkpoint follows it."""
    warmup = pd.to_numeric(part["warmup"], errors="coerce").iloc[0] if "warmup" in part else float("nan")
    if not np.isfinite(warmup) or not (part["step"] >= warmup).any():
        return part.iloc[:0]
    return part[part["step"] >= part.loc[part["step"] >= warmup, "step"].min()]


def growth_start(part: pd.DataFrame) -> pd.DataFrame:
    """One run's rows from where growth is measured: ``after_warmup`` where the frame says the warm-up, else from its
    first checkpoint after initialisation (step > 0: from step 0, the representations of random weights, any
    training at all would count as growth)."""
    if "warmup" in part and np.isfinite(pd.to_numeric(part["warmup"], errors="coerce").iloc[0]):
        return after_warmup(part)
    return part[part["step"] > 0]


# ---- the curve ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Curve:
    """Points ``x`` (ascending), the measure ``y`` at each, and ``draws`` (DRAWS x len(x)) of the same curve from a
    bootstrap, or None where the frame gives nothing to redraw it from."""

    x: np.ndarray
    y: np.ndarray
    draws: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.y)

    def without(self, i: int) -> "Curve":
        """The curve without its ``i``-th point (no draws)."""
        keep = np.arange(self.n) != i
        return Curve(self.x[keep], self.y[keep])


_HOW = {"mean": np.mean, "median": np.median}


def of_frame(part: pd.DataFrame, column: str, x: str = "step", how: str = "mean", seed: int = 0) -> Curve:
    """The curve of ``column`` against ``x`` in ``part``: at each x, the ``how`` ("mean" or "median") of its rows.
    Draws: where a point has several rows (batches, seeds, heads), they are resampled with replacement; where each
    point is one row with ``<column>_std`` (over batches, ddof 0) and ``n_batches``, its mean is redrawn from a normal
    of standard error std / sqrt(n_batches - 1); otherwise none."""
    rows = part[[x, column] + [c for c in (f"{column}_std", "n_batches") if c in part]].dropna(subset=[column])
    groups = [(float(at), g) for at, g in rows.groupby(x, sort=True)]
    xs = np.array([at for at, _ in groups], float)
    ys = np.array([float(_HOW[how](g[column].to_numpy(float))) for _, g in groups])
    rng = np.random.default_rng(seed)
    draws = None
    if any(len(g) > 1 for _, g in groups):
        draws = np.column_stack([_HOW[how](v[rng.integers(0, len(v), (DRAWS, len(v)))], axis=1)
                                 for v in (g[column].to_numpy(float) for _, g in groups)])
    elif {f"{column}_std", "n_batches"} <= set(rows.columns) and len(groups):
        std = np.array([float(g[f"{column}_std"].iloc[0]) for _, g in groups])
        n = np.array([float(g["n_batches"].iloc[0]) for _, g in groups])
        se = std / np.sqrt(np.where(n > 1, n - 1, np.nan))
        if np.isfinite(se).all():
            draws = ys + rng.standard_normal((DRAWS, len(ys))) * se
    return Curve(xs, ys, draws)


def _interval(values: np.ndarray) -> tuple[float, float]:
    """The central ``LEVEL`` percentile interval of bootstrap values."""
    tail = 100 * (1 - LEVEL) / 2
    return float(np.nanpercentile(values, tail)), float(np.nanpercentile(values, 100 - tail))


def _against(value: float, low: float, high: float, threshold: float) -> bool | None:
    """``value >= threshold``, or None where the interval [low, high] straddles the threshold."""
    if np.isfinite(low) and np.isfinite(high) and low < threshold <= high:
        return None
    return bool(value >= threshold)


# ---- monotone rise or fall ------------------------------------------------------------------------------------------

def spearman_interval(rho: float, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Confidence interval of a Spearman correlation of ``n`` points: Fisher's z with the variance
    (1 + rho^2 / 2) / (n - 3) of Bonett and Wright (2000); (-1, 1) below four points."""
    from scipy.stats import norm

    if n < 4 or not np.isfinite(rho):
        return -1.0, 1.0
    z = np.arctanh(np.clip(rho, -0.999, 0.999))
    half = norm.ppf(0.5 + level / 2) * np.sqrt((1 + rho**2 / 2) / (n - 3))
    return float(np.tanh(z - half)), float(np.tanh(z + half))


def spearman(x, y) -> float:
    """Spearman's rho of ``x`` and ``y``; NaN with fewer than 3 points or a constant side."""
    from scipy import stats

    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(stats.spearmanr(x, y).statistic)


@dataclass(frozen=True)
class Trend:
    """A curve read as a monotone trend: Spearman's ``rho`` of y against x and its interval [``low``, ``high``]
    (``spearman_interval``), and ``kept``: the share of the gain from the first point to the curve's extreme in the
    direction read that is still there at the last point (1: it ends at its extreme; 0: back where it started)."""

    rho: float
    low: float
    high: float
    kept: float
    n: int
    first: float
    last: float
    x0: float
    x1: float

    def words(self, fmt: str = ".2f") -> str:
        """"0.12 → 0.30 (rho +0.90, interval +0.59 to +0.98; 100% of the change kept; step 50 → 1,250)"."""
        steps = f"step {int(self.x0):,} → {int(self.x1):,}"
        if self.n <= TOO_FEW:
            read = f"{self.n} points, too few for a trend"
        elif not np.isfinite(self.rho):
            read = "no change"
        else:
            read = (f"rho {self.rho:+.2f}, interval {self.low:+.2f} to {self.high:+.2f}; {self.kept:.0%} of the change "
                    f"kept")
        return f"{self.first:{fmt}} → {self.last:{fmt}} ({read}; {steps})"


def trend(c: Curve, sign: int = 1) -> Trend:
    """``c`` read as a rise (``sign`` +1) or a fall (-1)."""
    rho = spearman(c.x, c.y)
    low, high = spearman_interval(rho, c.n)
    v = sign * c.y
    gain = float(v.max() - v[0]) if c.n else 0.0
    kept = float((v[-1] - v[0]) / gain) if gain > 0 else 0.0
    return Trend(rho, low, high, kept, c.n, *(float(c.y[i]) if c.n else np.nan for i in (0, -1)),
                 *(float(c.x[i]) if c.n else np.nan for i in (0, -1)))


def rises(c: Curve, min_rho: float, min_kept: float, sign: int = 1) -> tuple[bool | None, Trend]:
    """Monotone rise (``sign`` -1: fall) over the whole curve: rho in the direction read at least ``min_rho``, at
    least ``min_kept`` of the change kept at the end, and the interval of rho clear of 0. None with too few points,
    or where rho and the change kept clear their thresholds but the interval of rho includes 0."""
    t = trend(c, sign)
    if c.n <= TOO_FEW:
        return None, t
    rho, low = sign * t.rho, min(sign * t.low, sign * t.high)
    if not (np.isfinite(rho) and rho >= min_rho and t.kept >= min_kept):
        return False, t
    return (True if low > 0 else None), t


# ---- rise then fall -------------------------------------------------------------------------------------------------

def increasing_fit(y) -> np.ndarray:
    """The least-squares non-decreasing fit of ``y`` (pool adjacent violators)."""
    sums, counts = [], []
    for v in np.asarray(y, float):
        sums.append(v)
        counts.append(1)
        while len(sums) > 1 and sums[-2] / counts[-2] > sums[-1] / counts[-1]:
            s, k = sums.pop(), counts.pop()
            sums[-1] += s
            counts[-1] += k
    return np.repeat(np.array(sums) / np.array(counts), counts) if counts else np.array([])


def _sse(y, fit) -> float:
    return float(np.sum((np.asarray(y, float) - fit) ** 2))


def monotone_fit(y) -> np.ndarray:
    """The better (least squares) of the non-decreasing and the non-increasing fits of ``y``."""
    up, down = increasing_fit(y), -increasing_fit(-np.asarray(y, float))
    return up if _sse(y, up) <= _sse(y, down) else down


def unimodal_fit(y) -> np.ndarray:
    """The least-squares up-then-down fit of ``y``: over every split, non-decreasing before it and non-increasing
    from it (the monotone fits are the splits at the ends)."""
    y = np.asarray(y, float)
    best, fit = np.inf, y
    for k in range(len(y) + 1):
        candidate = np.concatenate([increasing_fit(y[:k]), -increasing_fit(-y[k:])])
        if (sse := _sse(y, candidate)) < best - 1e-15:
            best, fit = sse, candidate
    return fit


@dataclass(frozen=True)
class Peak:
    """A curve read as a rise then a fall: ``sse_ratio``, the squared error of the best unimodal fit over that of the
    best monotone fit (0: a clean rise-then-fall; 1: no better than monotone, or monotone exactly); the fitted peak
    (``peak``, at x ``at``, the first point where the fit reaches it, with its bootstrap interval [``low``,
    ``high``]); ``rise`` and ``fall``, the fitted peak over the fit's first and last value, minus 1."""

    sse_ratio: float
    at: float
    low: float
    high: float
    peak: float
    rise: float
    fall: float
    x0: float
    x1: float

    @property
    def inside(self) -> bool:
        """The peak and its interval lie strictly between the first and the last point."""
        return bool(self.low > self.x0 and self.high < self.x1)

    def words(self) -> str:
        where = f"step {int(self.at):,}" + (f" ({int(self.low):,} to {int(self.high):,})" if self.low != self.high else "")
        return (f"fitted peak {self.peak:.2f} at {where}, rise {self.rise:+.0%}, fall {self.fall:+.0%}, "
                f"SSE ratio {self.sse_ratio:.2f}")


def _peak_of(x, y) -> tuple[float, float, float, float, float]:
    """(SSE ratio, x of the fitted peak, the peak, rise, fall) of one curve."""
    uni, mono = unimodal_fit(y), monotone_fit(y)
    denominator = _sse(y, mono)
    ratio = _sse(y, uni) / denominator if denominator > 0 else 1.0
    top = float(uni.max())
    i = int(np.argmax(uni >= top - 1e-12 * max(abs(top), 1.0)))
    return ratio, float(x[i]), top, top / uni[0] - 1, top / uni[-1] - 1


def peak(c: Curve) -> Peak:
    """``c`` read as a rise then a fall (a positive measure: the rise and fall are relative)."""
    ratio, at, top, rise, fall = _peak_of(c.x, c.y)
    low = high = at
    if c.draws is not None:
        low, high = _interval(np.array([_peak_of(c.x, d)[1] for d in c.draws]))
    return Peak(ratio, at, low, high, top, rise, fall, float(c.x[0]), float(c.x[-1]))


def rises_then_falls(c: Curve, min_change: float, max_sse_ratio: float) -> tuple[bool | None, Peak, str]:
    """Rise-then-fall over the whole curve: the unimodal fit leaves at most ``max_sse_ratio`` of the best monotone
    fit's squared error, and its peak is at least ``min_change`` (relative) above its first and its last value, also
    without any one point (a single point's spike is no rise and fall). Returns (verdict, the peak, why not in
    words); None with fewer than four points, or where the peak's interval reaches the first or the last point."""
    p = peak(c)
    if c.n < TOO_FEW + 2:
        return None, p, f"{c.n} points (at least {TOO_FEW + 2} needed)"

    def rises_and_falls(q: Peak) -> bool:
        return q.rise >= min_change and q.fall >= min_change

    if not (p.sse_ratio <= max_sse_ratio and rises_and_falls(p)):
        return False, p, ""
    for i in range(c.n):
        if not rises_and_falls(peak(c.without(i))):
            return False, p, f"not without step {int(c.x[i]):,}"
    if not p.inside:
        return None, p, "the peak's interval reaches an end"
    return True, p, ""


# ---- plateau --------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plateau:
    """The last third of a curve's points (from point floor(2 (n - 1) / 3) on): its mean ``level``, its ``lowest``
    and ``highest`` values, and the curve's ``start`` (its first value)."""

    level: float
    lowest: float
    highest: float
    start: float

    @property
    def rise(self) -> float:
        """How far the plateau lies above the start."""
        return self.level - self.start

    @property
    def moves(self) -> float:
        return self.highest - self.lowest


def plateau(c: Curve) -> Plateau:
    late = c.y[int(np.floor(2 * (c.n - 1) / 3)):]
    return Plateau(float(late.mean()), float(late.min()), float(late.max()), float(c.y[0]))


# ---- bell over depth ------------------------------------------------------------------------------------------------

def _regions(x, y, band, ends) -> tuple[float, float, float]:
    """(mean of the first ``ends`` of depth, mean within ``band``, mean of the last ``ends``) of a profile."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    depth = (x - x[0]) / (x[-1] - x[0]) if x[-1] > x[0] else np.zeros_like(x)
    eps = 1e-9
    middle = (depth >= band[0] - eps) & (depth <= band[1] + eps)
    head, tail = depth <= ends + eps, depth >= 1 - ends - eps
    mean = lambda m: float(y[m].mean()) if m.any() else float("nan")  # noqa: E731
    return mean(head), mean(middle), mean(tail)


@dataclass(frozen=True)
class Bell:
    """A profile over depth read as a bell: the means of its ``head`` (first ``ENDS`` of depth), ``middle`` (within
    the band) and ``tail`` (last ``ENDS``); ``ratio``, the middle over the higher end, and its bootstrap interval
    [``low``, ``high``] (NaN without draws); ``n`` layers."""

    head: float
    middle: float
    tail: float
    ratio: float
    low: float
    high: float
    n: int

    @property
    def top(self) -> float:
        """The highest of the three region means."""
        return max(self.head, self.middle, self.tail)

    @property
    def spread(self) -> float:
        """The highest region mean over the lowest (1: as high at the ends as in the middle)."""
        bottom = min(self.head, self.middle, self.tail)
        return self.top / bottom if bottom > 0 else float("inf")

    def words(self) -> str:
        interval = f" (interval {self.low:.2f} to {self.high:.2f})" if np.isfinite(self.low) else ""
        return f"{self.ratio:.2f}{interval}"


def bell(c: Curve, band=MIDDLE, ends: float = ENDS) -> Bell:
    head, middle, tail = _regions(c.x, c.y, band, ends)
    ratio = middle / max(head, tail)
    low = high = float("nan")
    if c.draws is not None:
        regions = np.array([_regions(c.x, d, band, ends) for d in c.draws])
        low, high = _interval(regions[:, 1] / np.maximum(regions[:, 0], regions[:, 2]))
    return Bell(head, middle, tail, float(ratio), low, high, c.n)


def is_bell(b: Bell, min_ratio: float) -> bool | None:
    """The middle layers average at least ``min_ratio`` times the higher end; None with too few layers or where the
    ratio's interval straddles ``min_ratio``."""
    if b.n <= TOO_FEW or not np.isfinite(b.ratio):
        return None
    return _against(b.ratio, b.low, b.high, min_ratio)
