"""The two-measures page (Paper 2): what it asks of a runtime."""

from __future__ import annotations

import inspect

from anisotropy.chapters import p2_layer_profiles
from anisotropy.measure import planted
from anisotropy.pages import budget


def planted_bytes(n: int, d: int) -> float:
    """Peak host bytes of one planted cloud (``measure.planted.planted_cloud``) measured: its float64 draw and
    float32 copy (12 n d bytes), a float64 copy the metrics take (8 n d), and the sigma_1 share's d x d scatter
    with its eigenvalue workspace (``budget.metric_bytes``' 50 d^2). Bytes."""
    return 20.0 * n * d + 50.0 * d * d


def plan(p: dict, out: budget.Plan) -> None:
    """Paper 2's protocol (``p2_layer_profiles.plan``) with its default metrics, and the planted clouds
    (``measure.planted.planted_measures``: ``steps`` clouds of each of its two cases, ``planted_n`` x
    ``planted_d``, one at a time on the CPU: the scatter products, 2 n d^2, and an eigenvalue problem, 4/3 d^3)."""
    p2_layer_profiles.plan(p, out)
    n, d = p["planted_n"], p["planted_d"]
    clouds = 2 * inspect.signature(planted.planted_measures).parameters["steps"].default
    out.work.append(budget.Work("planted clouds", host_bytes=planted_bytes(n, d),
                                cpu_flops=clouds * (2.0 * n * d * d + 4 / 3 * d**3),
                                cpu_seconds=clouds * n * d / budget.NORMALS_PER_S, on_cpu=True,
                                sized_by=("planted_n", "planted_d")))
