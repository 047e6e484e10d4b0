"""Round axis ticks for the terminal charts: plotext splits a range evenly (15.5, 39.8,
64.1); these land on 1, 2, 2.5 or 5 times a power of ten. Pure functions, no Textual, so
the drawing in :mod:`tui.data.pareto_canvas` can use them."""

from __future__ import annotations

import math


def log_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Ticks at the powers of ten between ``lo`` and ``hi`` (positive), for axes plotted in
    log10 space (plotext's own log scale re-applies the log on every redraw)."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    ticks = list(range(a, b + 1))
    return [float(t) for t in ticks], [si(10.0**t) for t in ticks]


def nice_ticks(lo: float, hi: float, most: int) -> tuple[list[float], int]:
    """At most ``most`` (at least 2) ticks at round values (1, 2, 2.5 or 5 times a power of
    ten) inside ``[lo, hi]``, and the decimals their labels need. plotext's own ticks
    split the range evenly, so they land on values like 15.5, 39.8, 64.1."""
    most = max(2, most)
    span = hi - lo
    if not (span > 0 and math.isfinite(span)):
        return [lo], _decimals(abs(lo) or 1.0)
    for step in _steps(span / (2 * most)):  # the smallest round step that gives few enough
        first = math.ceil(lo / step - 1e-9)
        ticks = [(first + i) * step for i in range(math.floor(hi / step + 1e-9) - first + 1)]
        if len(ticks) <= most:
            return [0.0 if abs(t) < step * 1e-9 else t for t in ticks], _decimals(step)
    return [lo, hi], _decimals(span)


def _steps(rough: float):
    power = 10.0 ** math.floor(math.log10(rough))
    while True:
        for m in (1.0, 2.0, 2.5, 5.0):
            if m * power >= rough:
                yield m * power
        power *= 10


def _decimals(step: float) -> int:
    """Enough decimals to tell ticks ``step`` apart (2.5 needs one, 0.25 two)."""
    for d in range(7):
        if abs(round(step, d) - step) < step * 1e-6:
            return d
    return 6


def si(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:g}M"
    if v >= 1e3:
        return f"{v / 1e3:g}k"
    return f"{v:g}"
