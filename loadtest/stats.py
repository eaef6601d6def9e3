"""Percentiles as every benchmark reports them: rounded to 0.1, ``None`` for no values (JSON
has no NaN)."""

from collections.abc import Sequence

import numpy as np


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0 to 100)."""
    return round(float(np.percentile(values, q)), 1) if len(values) else None


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p90 and max."""
    if not len(values):
        return dict.fromkeys(("p50", "p90", "max"))
    return {"p50": percentile(values, 50), "p90": percentile(values, 90), "max": round(max(values), 1)}
