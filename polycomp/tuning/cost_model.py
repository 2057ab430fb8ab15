"""Cost models: rank untried configurations by a fit to the measured ones.

Place in the pipeline: inside the sampler's loop (sampler.py). Input: feature rows of
measured configurations (space.TuningSpace.encode, or a caller's featuriser adding
footprints, trip counts, parallel tiles...) and their log run times. Output: predicted
log times for candidate rows; only their order matters (the sampler measures the
candidates the model ranks best), so models are judged by ``spearman`` on held-out
configurations, not by their error.

Models (numpy only, refit from scratch after every batch: tens to hundreds of rows):

* ``RidgeModel``: ridge regression on standardised features expanded to a polynomial
  (degree 2: squares and pairwise products). Run time is close to a sum of convex bowls
  in log tile size plus interactions (a footprint is a product of tile sizes, a sum in
  logs), which a quadratic in log sizes fits with few points. The penalty is chosen by
  exact leave-one-out error among a few values (a closed form for ridge).
* ``BoostedTrees``: gradient-boosted depth-2 regression trees on squared error. Steps
  (a tile that stops fitting a cache, a parallel loop with too few tiles) are thresholds
  a polynomial smooths over and a tree splits on, but trees need more points.
* ``Ensemble`` (``CostModel``, the default): the mean of the two models' standardised
  predictions. The ranking measurement (tests/test_tuning_core.py: a synthetic cost
  with bowls, a cache cliff, interactions and noise over 5 knobs; Spearman on 400
  held-out configurations, mean of 3 draws) gave, trained on 60 / on 20 points:
  ensemble 0.978 / 0.896, quadratic ridge 0.973 / 0.866, trees 0.954 / 0.772, and the
  simpler baseline, linear ridge, 0.274 / 0.216 (a bowl is not monotone): see
  ``compare_models``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

ALPHAS = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)


def rankdata(a: Sequence[float]) -> np.ndarray:
    """Ranks from 1, ties sharing their mean rank."""
    a = np.asarray(a, dtype=float)
    order = np.argsort(a, kind="mergesort")
    ranks = np.empty(len(a))
    sorted_a = a[order]
    # boundaries of runs of equal values
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_a)) + 1]
    ends = np.r_[starts[1:], len(a)]
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = (s + e + 1) / 2.0
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (Pearson's on tie-averaged ranks); 0 when either
    side is constant."""
    if len(a) != len(b):
        raise ValueError(f"spearman: lengths differ ({len(a)} and {len(b)})")
    if len(a) < 2:
        return 0.0
    ra, rb = rankdata(a), rankdata(b)
    ra -= ra.mean()
    rb -= rb.mean()
    denom = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / denom) if denom > 0 else 0.0


# ----------------------------------------------------------------------------- ridge

def polynomial(X: np.ndarray, degree: int) -> np.ndarray:
    """Columns of X, and for degree 2 every product x_i x_j (i <= j), no constant."""
    X = np.atleast_2d(X)
    if degree == 1:
        return X
    if degree != 2:
        raise ValueError("degree must be 1 or 2")
    i, j = np.triu_indices(X.shape[1])
    return np.hstack([X, X[:, i] * X[:, j]])


class RidgeModel:
    """Ridge regression on a polynomial of standardised features (module doc)."""

    def __init__(self, degree: int = 2, alphas: Sequence[float] = ALPHAS):
        self.degree = degree
        self.alphas = tuple(alphas)
        self.alpha: float | None = None

    def _poly(self, X: np.ndarray) -> np.ndarray:
        Z = (np.atleast_2d(np.asarray(X, dtype=float)) - self.mean) / self.scale
        return polynomial(Z, self.degree)

    def fit(self, X: np.ndarray, y: np.ndarray) -> RidgeModel:
        X = np.atleast_2d(np.asarray(X, dtype=float))
        y = np.asarray(y, dtype=float)
        self.mean = X.mean(axis=0)
        self.scale = np.where(X.std(axis=0) > 1e-12, X.std(axis=0), 1.0)
        P = self._poly(X)
        # the products standardised too, so that one penalty weighs every column alike
        self.p_mean = P.mean(axis=0)
        self.p_scale = np.where(P.std(axis=0) > 1e-12, P.std(axis=0), 1.0)
        P = (P - self.p_mean) / self.p_scale
        self.y_mean = y.mean()
        yc = y - self.y_mean
        # one SVD serves every alpha: w = V diag(s / (s² + α)) Uᵀ y, and the leave-one-out
        # residual is r_i / (1 - H_ii) with H = U diag(s² / (s² + α)) Uᵀ (+ 1/n: the mean)
        U, s, Vt = np.linalg.svd(P, full_matrices=False)
        Uty = U.T @ yc
        n = len(y)
        best = None
        for alpha in self.alphas:
            shrink = s * s / (s * s + alpha)
            fitted = U @ (shrink * Uty)
            hat = (U * U) @ shrink + 1.0 / n
            loo = (yc - fitted) / np.maximum(1.0 - hat, 1e-6)
            err = float(np.mean(loo * loo))
            if best is None or err < best[0] - 1e-12:
                best = (err, alpha)
        self.alpha = best[1] if best else 1.0
        self.coef = Vt.T @ ((s / (s * s + self.alpha)) * Uty)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return ((self._poly(X) - self.p_mean) / self.p_scale) @ self.coef + self.y_mean


# ----------------------------------------------------------------------------- trees

class BoostedTrees:
    """Gradient boosting of depth-``depth`` regression trees on squared error."""

    def __init__(self, n_trees: int = 150, depth: int = 2, learning_rate: float = 0.1,
                 min_leaf: int = 2):
        self.n_trees = n_trees
        self.depth = depth
        self.learning_rate = learning_rate
        self.min_leaf = min_leaf

    def fit(self, X: np.ndarray, y: np.ndarray) -> BoostedTrees:
        X = np.atleast_2d(np.asarray(X, dtype=float))
        y = np.asarray(y, dtype=float)
        self.base = float(y.mean())
        residual = y - self.base
        self.trees: list[list] = []
        order = np.argsort(X, axis=0, kind="mergesort")  # once: splits reuse it
        for _ in range(self.n_trees):
            tree = self._grow(X, order, residual, np.ones(len(y), bool), self.depth)
            step = self._apply(tree, X)
            residual = residual - self.learning_rate * step
            self.trees.append(tree)
        return self

    def _grow(self, X, order, r, mask, depth):
        """A leaf [value] or a node [feature, threshold, left, right]."""
        n = int(mask.sum())
        value = float(r[mask].mean()) if n else 0.0
        if depth == 0 or n < 2 * self.min_leaf:
            return [value]
        best = None  # (gain, feature, threshold)
        total, count = r[mask].sum(), n
        for f in range(X.shape[1]):
            idx = order[:, f][mask[order[:, f]]]
            xs, rs = X[idx, f], r[idx]
            csum = np.cumsum(rs)[:-1]
            left_n = np.arange(1, n)
            ok = (xs[1:] > xs[:-1]) & (left_n >= self.min_leaf) & (n - left_n >= self.min_leaf)
            if not ok.any():
                continue
            # reduction of squared error: S_L²/n_L + S_R²/n_R - S²/n
            gain = csum ** 2 / left_n + (total - csum) ** 2 / (count - left_n)
            gain = np.where(ok, gain, -np.inf)
            k = int(np.argmax(gain))
            if best is None or gain[k] > best[0]:
                best = (gain[k], f, (xs[k] + xs[k + 1]) / 2.0)
        if best is None:
            return [value]
        _, f, t = best
        left = mask & (X[:, f] <= t)
        right = mask & ~(X[:, f] <= t)
        return [f, t, self._grow(X, order, r, left, depth - 1),
                self._grow(X, order, r, right, depth - 1)]

    @staticmethod
    def _apply(tree, X):
        if len(tree) == 1:
            return np.full(len(X), tree[0])
        f, t, left, right = tree
        go_left = X[:, f] <= t
        out = np.empty(len(X))
        if go_left.any():
            out[go_left] = BoostedTrees._apply(left, X[go_left])
        if (~go_left).any():
            out[~go_left] = BoostedTrees._apply(right, X[~go_left])
        return out

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=float))
        out = np.full(len(X), self.base)
        for tree in self.trees:
            out += self.learning_rate * self._apply(tree, X)
        return out


# ----------------------------------------------------------------------------- ensemble

class Ensemble:
    """The mean of several models' standardised predictions (each model's predictions
    on its training rows set its mean and scale): the members' scales differ, and only
    the order counts. Standardised values, not ranks, so that predictions made in
    different calls compare."""

    def __init__(self, members: Sequence[Callable[[], object]] | None = None):
        self.factories = list(members) if members is not None else [RidgeModel, BoostedTrees]

    def fit(self, X: np.ndarray, y: np.ndarray) -> Ensemble:
        self.models, self.norms = [], []
        for factory in self.factories:
            model = factory().fit(X, y)
            fitted = model.predict(X)
            self.models.append(model)
            self.norms.append((float(fitted.mean()), float(fitted.std()) or 1.0))
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=float))
        return np.mean([(m.predict(X) - mu) / sd
                        for m, (mu, sd) in zip(self.models, self.norms)], axis=0)


CostModel = Ensemble


def compare_models(X: np.ndarray, y: np.ndarray, n_train: int, seed: int = 0,
                   models: dict[str, Callable[[], object]] | None = None) -> dict[str, float]:
    """Spearman of each model on held-out rows: trained on ``n_train`` random rows of
    (X, y), scored on the rest. The measurement behind the default model choice."""
    models = models or {"linear": lambda: RidgeModel(degree=1), "ridge2": RidgeModel,
                        "trees": BoostedTrees, "ensemble": Ensemble}
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(y))
    train, test = perm[:n_train], perm[n_train:]
    return {name: spearman(make().fit(X[train], y[train]).predict(X[test]), y[test])
            for name, make in models.items()}
