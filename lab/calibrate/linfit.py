"""Ordinary least squares that says what the data cannot determine.

One cost block (e.g. target-verify ms per decode iteration) is a linear model
``y = X beta + e`` over measured windows (rows) and named regressors (columns).
:func:`fit_linear` returns the estimate, its covariance and, for every column, whether the
data determine it:

- a column that is zero in every row (the data never exercised it, e.g. eager verify when
  every window ran in a CUDA graph) is *undetermined*;
- a column nearly in the span of the others is *undetermined* (it cannot be separated from
  them): its variance inflation factor ``VIF_j = 1 / (1 - R_j^2)`` exceeds ``vif_limit``
  (default 100: 99 % of the column is explained by the others), with ``R_j^2`` the
  uncentered coefficient of determination of column j regressed on the other columns (the
  intercept, when there is one, is itself a column). Columns are listed by priority (the main
  costs first, second-order effects such as KV-cache cost and offsets last) and dropped one at a
  time, the last-listed column over the limit first, until every remaining VIF is within the
  limit (so a collinear KV term is dropped, not the intercept it is collinear with). Source: Marquardt (1970),
  "Generalized inverses, ridge regression, biased linear estimation", Technometrics 12;
  Belsley, Kuh & Welsch (1980), "Regression Diagnostics", ch. 3.

An undetermined column's coefficient is fixed at 0 for the fit, so its effect is *aliased*
into the determined columns along the pattern the data followed (e.g. KV-cache cost aliased
into the per-sequence slope when KV tokens grew in proportion to the batch).
:meth:`LinearFit.estimable` says whether a new row follows that pattern (a linear function
``x0' beta`` is estimable iff ``x0`` lies in the row space of ``X``: Searle (1971), "Linear
Models", ch. 5.4); a prediction that is not estimable is refused, never extrapolated.

Uncertainty (Student t, ``n - p`` degrees of freedom, ``s^2 = RSS / (n - p)``):

- ``cov = s^2 (X'X)^-1`` of the determined coefficients;
- the prediction interval of one new observation at ``x0``:
  ``x0' b +- t_{n-p, 1-alpha/2} * s * sqrt(1 + x0' (X'X)^-1 x0)`` (Montgomery, Peck &
  Vining, "Introduction to Linear Regression Analysis", 5th ed., eq. 3.54);
- :meth:`LinearFit.draw`: joint draws of ``(beta, sigma)`` from the posterior under the
  non-informative prior ``p(beta, sigma^2) ~ 1 / sigma^2``: ``sigma^2 = (n - p) s^2 / chi2_{n-p}``,
  ``beta | sigma ~ N(b, sigma^2 (X'X)^-1)``; a new observation adds ``N(0, sigma^2)``, so the
  simulated predictive interval of a linear function equals the t interval above (Gelman et al.,
  "Bayesian Data Analysis", 3rd ed., section 14.2). :mod:`lab.calibrate.predict` pushes these
  draws through the scheduler simulation to get intervals of non-linear quantities (tok/s).

With ``n == p`` (as many windows as determined columns) the coefficients are determined but
``s`` is not: ``s2`` is None and intervals are unavailable (``None``), never zero.

Outlying windows (a first-use stall inside a measured window, a machine busy for one repeat)
are excluded one at a time, and named with their reason, while the largest externally
studentized residual ``t_i = e_i / (s_(i) sqrt(1 - h_ii))`` exceeds the Bonferroni critical value
``t_{n-p-1, 1 - alpha/(2n)}`` (alpha 0.05; Cook & Weisberg 1982, "Residuals and Influence in
Regression", section 2.2.3) and the window is more than 2 % off the others' fit (a tightly fitted
block would otherwise lose windows for deviations of no consequence), at most a quarter of the
windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lab.analysis.stats import t_quantile

__all__ = ["LinearFit", "fit_linear", "VIF_LIMIT"]

#: Columns with a variance inflation factor above this are undetermined (see module docstring).
VIF_LIMIT = 100.0
_ZERO = 1e-12


def _uncentered_r2(col: np.ndarray, others: np.ndarray) -> float:
    """R^2 (uncentered) of ``col`` regressed on ``others`` (n x k, k may be 0)."""
    ss = float(col @ col)
    if ss <= _ZERO:
        return 1.0
    if others.shape[1] == 0:
        return 0.0
    coef, *_ = np.linalg.lstsq(others, col, rcond=None)
    resid = col - others @ coef
    return max(0.0, 1.0 - float(resid @ resid) / ss)


def _vif(X: np.ndarray, j: int, keep: list[int]) -> float:
    others = X[:, [k for k in keep if k != j]]
    r2 = _uncentered_r2(X[:, j], others)
    return math.inf if r2 >= 1.0 - 1e-15 else 1.0 / (1.0 - r2)


@dataclass
class LinearFit:
    """A fitted block. Arrays are indexed like ``names``.

    :ivar names: column names (the constants of the block).
    :ivar coef: estimates (undetermined columns: 0, aliased; see ``determined``).
    :ivar determined: per column, whether the data determine it.
    :ivar reasons: per undetermined column, why (zero column, or its VIF and what it aliases with).
    :ivar vif: per column, its VIF among the determined columns (inf when undetermined).
    :ivar cov: covariance of ``coef`` (zeros on undetermined rows/columns); None if ``s2`` is None.
    :ivar xtx_inv: ``(X'X)^-1`` over all columns (zeros on undetermined rows/columns).
    :ivar s2: residual variance ``RSS / (n - p)`` (None when ``n == p``); :ivar dof: ``n - p``.
    :ivar n: rows; :ivar rows: a label per row (which result and point it came from).
    :ivar X, y: the data (kept for estimability checks and diagnostics).
    :ivar excluded: ``{row label: why}`` for windows left out as outliers (module docstring).
    """

    names: list[str]
    coef: np.ndarray
    determined: list[bool]
    reasons: dict[str, str]
    vif: list[float]
    cov: np.ndarray | None
    xtx_inv: np.ndarray
    s2: float | None
    dof: int
    n: int
    rows: list[str]
    X: np.ndarray
    y: np.ndarray
    _alias: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    excluded: dict[str, str] = field(default_factory=dict)

    def index(self, name: str) -> int:
        """Column index of ``name``. :raises KeyError: unknown column."""
        return self.names.index(name)

    def value(self, name: str) -> float | None:
        """Estimate of ``name``, or None when undetermined."""
        i = self.index(name)
        return float(self.coef[i]) if self.determined[i] else None

    def stderr(self, name: str) -> float | None:
        """Standard error of ``name`` (None when undetermined or when ``s2`` is None)."""
        i = self.index(name)
        if not self.determined[i] or self.cov is None:
            return None
        return float(math.sqrt(max(self.cov[i, i], 0.0)))

    def ci95(self, name: str) -> tuple[float, float] | None:
        """95 % t confidence interval of ``name`` (None when undetermined or ``s2`` is None)."""
        se, v = self.stderr(name), self.value(name)
        if se is None or v is None:
            return None
        t = t_quantile(0.975, self.dof)
        return v - t * se, v + t * se

    def estimable(self, x0: np.ndarray, rtol: float = 0.05) -> tuple[bool, list[str]]:
        """Whether ``x0' beta`` is determined by the data (Searle 1971, ch. 5.4).

        For each undetermined column j with ``x0[j] != 0``, ``x0[j]`` must equal what the data's
        pattern predicts from the determined columns (``x0[det] @ alias_j``, where ``alias_j``
        regresses column j on the determined columns) within the larger of ``rtol`` of the
        column's RMS and 3 times the data's own scatter about that pattern (the RMS residual of
        the alias regression: a row as far off the pattern as the measured windows were is as
        determined as they are), both scaled by the size of ``x0`` relative to the data's rows (so
        a window total and a per-iteration mean are judged alike). A column the data never
        exercised (all zero) is estimable only where ``x0[j] == 0``.

        :returns: ``(ok, names of the undetermined constants the row depends on)``.
        """
        x0 = np.asarray(x0, float)
        bad = []
        det = [k for k, d in enumerate(self.determined) if d]
        row_norm = float(np.mean(np.linalg.norm(self.X, axis=1))) if self.n else 0.0
        scale = float(np.linalg.norm(x0)) / row_norm if row_norm > _ZERO else 1.0
        for j, d in enumerate(self.determined):
            if d or abs(x0[j]) <= _ZERO:
                continue
            col = self.X[:, j]
            rms = float(np.sqrt(np.mean(col**2))) if len(col) else 0.0
            if rms <= _ZERO:
                bad.append(self.names[j])
                continue
            expect = float(x0[det] @ self._alias[j]) if det else 0.0
            resid = col - (self.X[:, det] @ self._alias[j] if det else 0.0)
            scatter = float(np.sqrt(np.mean(resid**2)))
            if abs(x0[j] - expect) > max(rtol * rms, 3.0 * scatter) * scale:
                bad.append(self.names[j])
        return not bad, bad

    def predict(self, x0: np.ndarray) -> float:
        """Point prediction ``x0' b`` (no estimability check; see :meth:`estimable`)."""
        return float(np.asarray(x0, float) @ self.coef)

    def prediction_interval(self, x0: np.ndarray, level: float = 0.95) -> tuple[float, float] | None:
        """t prediction interval of one new observation at ``x0`` (module docstring; Montgomery,
        Peck & Vining eq. 3.54). None when ``s2`` is None."""
        if self.s2 is None:
            return None
        x0 = np.asarray(x0, float)
        yhat = self.predict(x0)
        half = t_quantile(0.5 + level / 2, self.dof) * math.sqrt(self.s2 * (1.0 + x0 @ self.xtx_inv @ x0))
        return yhat - half, yhat + half

    def draw(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        """``size`` posterior draws ``(betas (size x p), sigmas (size,))`` (Gelman et al., BDA3
        section 14.2; module docstring). Undetermined columns stay 0. With ``s2`` None the
        coefficients are returned as estimated and sigma as 0 (no uncertainty can be drawn;
        :attr:`s2` None tells the caller)."""
        p = len(self.names)
        if self.s2 is None or self.dof <= 0:
            return np.tile(self.coef, (size, 1)), np.zeros(size)
        sig2 = self.s2 * self.dof / rng.chisquare(self.dof, size)
        det = [k for k, d in enumerate(self.determined) if d]
        betas = np.tile(self.coef, (size, 1))
        if det:
            v = self.xtx_inv[np.ix_(det, det)]
            chol = np.linalg.cholesky(v + 1e-18 * np.eye(len(det)))
            z = rng.standard_normal((size, len(det)))
            betas[:, det] += (z @ chol.T) * np.sqrt(sig2)[:, None]
        assert betas.shape == (size, p)
        return betas, np.sqrt(sig2)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (``constants``: value, stderr, ci95, determined, reason, vif)."""
        return {
            "n": self.n, "dof": self.dof, "s2": self.s2, "rows": self.rows, "excluded": self.excluded,
            "residual_sd": math.sqrt(self.s2) if self.s2 is not None else None,
            "constants": {name: {"value": self.value(name), "stderr": self.stderr(name), "ci95": self.ci95(name),
                                 "determined": self.determined[i], "reason": self.reasons.get(name),
                                 "vif": None if math.isinf(self.vif[i]) else self.vif[i]}
                          for i, name in enumerate(self.names)},
        }


def _studentized(fit: "LinearFit") -> np.ndarray:
    """Externally studentized residuals of ``fit`` (NaN where undefined)."""
    n, p = fit.n, fit.n - fit.dof
    out = np.full(n, np.nan)
    if fit.s2 is None or fit.dof < 2:
        return out
    e = fit.y - fit.X @ fit.coef
    h = np.einsum("ij,jk,ik->i", fit.X, fit.xtx_inv, fit.X)
    for i in range(n):
        if h[i] >= 1 - 1e-9:
            continue
        s2_i = ((n - p) * fit.s2 - e[i] ** 2 / (1 - h[i])) / (n - p - 1)
        if s2_i > 0:
            out[i] = e[i] / np.sqrt(s2_i * (1 - h[i]))
    return out


def fit_linear(X: np.ndarray, y: np.ndarray, names: list[str], rows: list[str] | None = None,
               vif_limit: float = VIF_LIMIT, outliers: bool = True) -> LinearFit:
    """OLS of ``y`` on ``X`` with undetermined columns marked and outlying windows excluded
    (module docstring).

    :param X: n x p regressors; :param y: n observations; :param names: p column names.
    :param rows: a label per row (provenance). :param vif_limit: see :data:`VIF_LIMIT`.
    :param outliers: apply the Bonferroni outlier test (module docstring).
    :returns: a :class:`LinearFit` (with no rows every column is undetermined).
    :raises ValueError: shapes disagree, or a non-finite value in ``X`` or ``y``.
    """
    labels = list(rows or [f"row {i}" for i in range(len(y))])
    fit = _fit(X, y, names, labels, vif_limit)
    excluded: dict[str, str] = {}
    while outliers and fit.n >= 4 and len(excluded) < len(labels) // 4:
        t = _studentized(fit)
        if np.all(np.isnan(t)):
            break
        crit = t_quantile(1 - 0.05 / (2 * fit.n), fit.dof - 1)
        pred = fit.X @ fit.coef
        far = np.abs(fit.y - pred) > 0.02 * np.abs(pred)
        t = np.where(far, t, np.nan)
        if np.all(np.isnan(t)):
            break
        i = int(np.nanargmax(np.abs(t)))
        if abs(t[i]) <= crit:
            break
        excluded[fit.rows[i]] = (f"outlier: externally studentized residual {t[i]:+.1f} beyond the Bonferroni "
                                 f"critical value {crit:.1f} (observed {fit.y[i]:.4g}, the others' fit "
                                 f"{float(fit.X[i] @ fit.coef):.4g})")
        keep = [k for k in range(fit.n) if k != i]
        fit = _fit(fit.X[keep], fit.y[keep], names, [fit.rows[k] for k in keep], vif_limit)
    fit.excluded = excluded
    return fit


def _fit(X: np.ndarray, y: np.ndarray, names: list[str], rows: list[str], vif_limit: float) -> LinearFit:
    X = np.asarray(X, float).reshape(len(y), len(names)) if len(y) else np.zeros((0, len(names)))
    y = np.asarray(y, float)
    if X.shape != (len(y), len(names)):
        raise ValueError(f"fit_linear: X is {X.shape}, expected ({len(y)}, {len(names)})")
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(y))):
        raise ValueError("fit_linear: non-finite regressor or observation. Fix: drop windows without the timer")
    n, p = X.shape
    reasons: dict[str, str] = {}
    keep = []
    for j in range(p):
        if n == 0 or float(X[:, j] @ X[:, j]) <= _ZERO:
            reasons[names[j]] = "no measured window exercises it (its regressor is zero in every window)"
        else:
            keep.append(j)
    while keep:
        vifs = {j: _vif(X, j, keep) for j in keep}
        over = [j for j in keep if vifs[j] > vif_limit]
        if not over and len(keep) <= n:
            break
        worst = over[-1] if over else keep[-1]
        if not over:
            reasons[names[worst]] = f"more constants than windows ({n}); add measured points"
        else:
            others = [names[k] for k in keep if k != worst]
            reasons[names[worst]] = (f"cannot be separated from {', '.join(others) or 'nothing'} in these windows "
                                     f"(VIF {'inf' if math.isinf(vifs[worst]) else f'{vifs[worst]:.0f}'} > {vif_limit:g}): "
                                     "measure points where it varies on its own")
        keep.remove(worst)
    determined = [j in keep for j in range(p)]
    coef = np.zeros(p)
    xtx_inv = np.zeros((p, p))
    alias: dict[int, np.ndarray] = {}
    if keep:
        Xk = X[:, keep]
        b, *_ = np.linalg.lstsq(Xk, y, rcond=None)
        coef[keep] = b
        xtx_inv[np.ix_(keep, keep)] = np.linalg.inv(Xk.T @ Xk)
    for j in range(p):
        if not determined[j]:
            alias[j] = (np.linalg.lstsq(X[:, keep], X[:, j], rcond=None)[0] if keep else np.zeros(0))
    dof = n - len(keep)
    resid = y - X @ coef
    s2 = float(resid @ resid) / dof if dof > 0 else None
    cov = s2 * xtx_inv if s2 is not None else None
    vif = [(_vif(X, j, keep) if determined[j] else math.inf) for j in range(p)]
    return LinearFit(names=list(names), coef=coef, determined=determined, reasons=reasons, vif=vif, cov=cov,
                     xtx_inv=xtx_inv, s2=s2, dof=dof, n=n, rows=list(rows or [f"row {i}" for i in range(n)]),
                     X=X, y=y, _alias=alias)
