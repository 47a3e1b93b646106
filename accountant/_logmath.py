"""Log-space arithmetic used by the RDP bounds (no overflow at alpha = 4096, no lost digits
when the quantity of interest is ``log(1 + tiny)``)."""

from __future__ import annotations

import numpy as np
from scipy import special

__all__ = ["log_comb", "log1p_exp", "logsumexp", "log_expm1"]


def log_comb(n, k):
    """log C(n, k) through log-gamma (vectorised; exact to ~1e-15 relative in the log)."""
    n = np.asarray(n, dtype=float)
    k = np.asarray(k, dtype=float)
    return special.gammaln(n + 1.0) - special.gammaln(k + 1.0) - special.gammaln(n - k + 1.0)


def logsumexp(x, axis=None):
    """log(sum(exp(x))) that tolerates all -inf entries (returns -inf) and +inf (returns inf)."""
    x = np.asarray(x, dtype=float)
    with np.errstate(invalid="ignore"):
        return special.logsumexp(x, axis=axis)


def log1p_exp(x):
    """log(1 + exp(x)), accurate for x -> -inf (returns exp(x)) and x -> +inf (returns x)."""
    x = np.asarray(x, dtype=float)
    out = np.where(x > 30.0, x + np.log1p(np.exp(-np.abs(x))), np.log1p(np.exp(np.minimum(x, 30.0))))
    return out if out.ndim else float(out)


def log_expm1(x):
    """log(exp(x) - 1) for x > 0, accurate for tiny x (log(x)) and huge x (x)."""
    x = np.asarray(x, dtype=float)
    with np.errstate(divide="ignore"):
        out = np.where(x > 30.0, x + np.log1p(-np.exp(-np.abs(x))), np.log(np.expm1(np.minimum(x, 30.0))))
    return out if out.ndim else float(out)
