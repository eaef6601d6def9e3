"""The simplest rule on a few features that tells two kinds apart: one threshold, or two joined by
AND, chosen for the most recall at a given precision (``interruption_table.faster_stop`` asks it
whether the audio alone could stop an answer before the words are known)."""

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Rule:
    """``feature op threshold`` for one or two features, all to hold."""

    parts: list[tuple[str, str, float]] = field(default_factory=list)

    def __call__(self, features: dict[str, float] | None) -> bool:
        if features is None:
            return False
        return all(features[name] >= t if op == ">=" else features[name] <= t for name, op, t in self.parts)

    def describe(self) -> str:
        return " and ".join(f"{name} {op} {t:.3g}" for name, op, t in self.parts)


def best_rule(rows: list[tuple[dict[str, float] | None, bool]], min_precision: float) -> Rule:
    """The rule of one or two thresholds with the most recall at ``min_precision`` or more
    over ``rows`` (features, real); the most precise if none reaches it."""
    names = sorted(next(f for f, _ in rows if f is not None))
    real = np.array([r for _, r in rows])
    singles: list[tuple[str, str, float]] = []
    fires: list[np.ndarray] = []
    for name in names:
        values = np.array([f[name] if f is not None else np.nan for f, _ in rows])
        for t in np.unique(np.nanquantile(values, np.linspace(0.02, 0.98, 33))):
            for op in (">=", "<="):
                singles.append((name, op, float(t)))
                with np.errstate(invalid="ignore"):
                    fires.append(np.nan_to_num(values >= t if op == ">=" else values <= t).astype(bool))
    matrix = np.array(fires, dtype=np.float64)
    true = matrix @ real.astype(np.float64)
    taken = matrix.sum(1)
    pair_true = (matrix * real) @ matrix.T
    pair_taken = matrix @ matrix.T
    candidates = [(true[i], taken[i], [i]) for i in range(len(singles))]
    upper = np.triu_indices(len(singles), 1)
    candidates += [
        (pair_true[i, j], pair_taken[i, j], [i, j])
        for i, j in zip(*upper, strict=True)
        if singles[i][0] != singles[j][0]
    ]
    positives = max(1, int(real.sum()))

    def rank(candidate: tuple[float, float, list[int]]) -> tuple[bool, float, float, int]:
        t, n, parts = candidate
        precision = t / n if n else 0.0
        return (
            precision >= min_precision,
            t / positives if precision >= min_precision else precision,
            precision,
            -len(parts),
        )

    chosen = max(candidates, key=rank)
    return Rule([singles[i] for i in chosen[2]])
