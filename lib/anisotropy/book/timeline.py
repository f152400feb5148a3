"""What a build's timeline says about its cores: how many were busy on average, and how many core-seconds stood idle
on its critical path (what a better schedule could still win).

A build's items (chapters and training units) each ran from ``start`` to ``end`` (seconds since the build started)
for ``cpu`` CPU seconds (its processes'). Then:

- cores busy = CPU seconds / wall seconds (of the whole build, its own process and every process it started);
- the critical path: from the item that ended last back to the build's start, each item preceded by the item that
  ended last before it started (the one whose end let it start: a chapter it runs after, or the item that freed
  the core it waited for; on a tie, one it runs after);
- idle core-seconds on it: over the time the path's items ran, ``cores`` minus the cores the items kept busy (each
  item's CPU seconds spread evenly over its wall time), never below zero at any moment, integrated.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """One item of a build: ``name``, ``start`` and ``end`` (seconds since the build started), ``cpu`` (its CPU
    seconds) and ``after`` (the items it ran after)."""

    name: str
    start: float
    end: float
    cpu: float
    after: tuple = ()

    @property
    def rate(self) -> float:
        """Cores it kept busy on average while it ran."""
        return self.cpu / (self.end - self.start) if self.end > self.start else 0.0


def cores_busy(cpu_seconds: float, wall_seconds: float) -> float:
    """CPU seconds / wall seconds."""
    return cpu_seconds / wall_seconds if wall_seconds > 0 else 0.0


def critical_path(spans: list[Span]) -> list[Span]:
    """The critical path (the module's docstring), first item first."""
    spans = [s for s in spans if s.end > s.start]
    if not spans:
        return []
    path = [max(spans, key=lambda s: s.end)]
    while True:
        now = path[-1]
        before = [s for s in spans if s.end <= now.start and s not in path]
        if not before:
            return path[::-1]
        path.append(max(before, key=lambda s: (s.end, s.name in now.after)))


def idle_core_seconds(spans: list[Span], path: list[Span], cores: int) -> float:
    """Core-seconds idle while the items of ``path`` ran (the module's docstring), the items of ``spans`` keeping
    cores busy."""
    busy = [s for s in spans if s.end > s.start]
    cuts = sorted({t for s in busy for t in (s.start, s.end)})
    idle = 0.0
    for a, b in zip(cuts, cuts[1:]):
        if not any(p.start <= a and b <= p.end for p in path):
            continue
        rate = sum(s.rate for s in busy if s.start <= a and b <= s.end)
        idle += max(0.0, cores - rate) * (b - a)
    return idle
