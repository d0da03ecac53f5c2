"""Shapiro-Wilk normality test and the Binomial(n, 1/2) CDF, in numpy (no scipy import).

Every timed point summarises its samples, and importing ``scipy.stats`` costs a job about a
second, so the two distribution functions the summaries need are written out here:

* :func:`shapiro_wilk` -- W and its p-value by Royston's algorithm AS R94 (Royston 1995, "A
  remark on algorithm AS 181: the W-test for normality"), the algorithm ``scipy.stats.shapiro``
  implements; ``tests/test_stats.py`` checks the two agree.
* :func:`binom_half_cdf` -- ``P(B <= k)`` for ``B ~ Binomial(n, 1/2)``, for the order-statistic
  confidence interval of the median.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

import numpy as np

_NORMAL = NormalDist()


@lru_cache(maxsize=64)
def binom_half_cdf(n: int) -> np.ndarray:
    """``cdf[k] = P(B <= k)`` for ``k = 0..n``, ``B ~ Binomial(n, 1/2)`` (log-space, cached per n)."""
    if n < 0:
        raise ValueError("n must be >= 0")
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=np.float64)))])
    k = np.arange(n + 1)
    log_pmf = log_fact[n] - log_fact[k] - log_fact[n - k] - n * math.log(2.0)
    cdf = np.cumsum(np.exp(log_pmf))
    return np.minimum(cdf, 1.0)


def _poly(coefs: tuple[float, ...], x: float) -> float:
    """``coefs[0] + coefs[1] x + ...``."""
    return sum(c * x**i for i, c in enumerate(coefs))


@lru_cache(maxsize=64)
def _coefficients(n: int) -> np.ndarray:
    """The Shapiro-Wilk weights a_1..a_n of AS R94."""
    if n == 3:
        return np.array([-math.sqrt(0.5), 0.0, math.sqrt(0.5)])
    m = np.array([_NORMAL.inv_cdf((i - 0.375) / (n + 0.25)) for i in range(1, n + 1)])
    m2 = float(np.sum(m * m))
    u = 1.0 / math.sqrt(n)
    a = m / math.sqrt(m2)
    an = _poly((a[-1], 0.221157, -0.147981, -2.071190, 4.434685, -2.706056), u)
    a_out = np.empty(n)
    if n > 5:
        an1 = _poly((a[-2], 0.042981, -0.293762, -1.752461, 5.682633, -3.582633), u)
        phi = (m2 - 2 * m[-1] ** 2 - 2 * m[-2] ** 2) / (1 - 2 * an**2 - 2 * an1**2)
        a_out[2:-2] = m[2:-2] / math.sqrt(phi)
        a_out[-1], a_out[-2], a_out[0], a_out[1] = an, an1, -an, -an1
    else:
        phi = (m2 - 2 * m[-1] ** 2) / (1 - 2 * an**2)
        a_out[1:-1] = m[1:-1] / math.sqrt(phi)
        a_out[-1], a_out[0] = an, -an
    return a_out


def shapiro_wilk(samples: np.ndarray) -> tuple[float, float]:
    """``(W, p)`` for 3 <= n <= 5000 samples that are not all equal."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    n = x.size
    if n < 3 or n > 5000:
        raise ValueError("Shapiro-Wilk needs 3 <= n <= 5000 samples")
    centred = x - x.mean()
    ss = float(np.sum(centred * centred))
    if ss == 0.0:
        raise ValueError("Shapiro-Wilk is undefined when all samples are equal")
    w = min(1.0, float(np.dot(_coefficients(n), x)) ** 2 / ss)
    if n == 3:
        p = 6.0 / math.pi * (math.asin(math.sqrt(w)) - math.asin(math.sqrt(0.75)))
        return w, max(0.0, min(1.0, p))
    if n <= 11:
        gamma = 0.459 * n - 2.273
        mu = _poly((0.5440, -0.39978, 0.025054, -6.714e-4), n)
        sigma = math.exp(_poly((1.3822, -0.77857, 0.062767, -0.0020322), n))
        y = -math.log(gamma - math.log1p(-w)) if w < 1.0 else math.inf
    else:
        ln = math.log(n)
        mu = _poly((-1.5861, -0.31082, -0.083751, 0.0038915), ln)
        sigma = math.exp(_poly((-0.4803, -0.082676, 0.0030302), ln))
        y = math.log1p(-w) if w < 1.0 else -math.inf
    z = (y - mu) / sigma
    return w, 1.0 - _NORMAL.cdf(z) if math.isfinite(z) else (1.0 if z < 0 else 0.0)
