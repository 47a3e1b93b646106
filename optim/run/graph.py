"""Time-varying directed exponential graph and push-sum mixing (AdaD2P paper App. C; SGP of Assran et al. 2019).

``variant="paper"`` (the AdaD2P paper's text): node j sends to ``j + 2^(k mod (m+1))`` at iteration k, with
``m = floor(log2(n-1))``.  ``variant="sgp"`` (SGP reference code): rank j cycles through the
peers ``j+1, j-1, j+2, j-2, ..., j+2^m, j-2^m`` (mod n, duplicates removed), one per iteration.
Every node keeps weight 1/2 and sends 1/2 (SGP's uniform mixing), so each ``P^k`` is column
stochastic (Assumption 1); here it is also row stochastic, and push-sum weights stay 1.
"""

from __future__ import annotations

import torch
from ...accountant.validation import InputError

__all__ = ["VARIANTS"]

VARIANTS = ("paper", "sgp")


def _check(n: int, variant: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(f"n={n!r} is not allowed: expected an integer >= 1 (number of nodes).")
    if variant not in VARIANTS:
        raise InputError(f"variant={variant!r} is not allowed: expected one of {VARIANTS}.")
    return n


def exponential_hops(n: int) -> list[int]:
    """``[2^0, ..., 2^m]``, ``m = floor(log2(n - 1))`` by integer bit length (AdaD2P-E5); [] for n = 1.

    >>> exponential_hops(20)
    [1, 2, 4, 8, 16]

    Args:
        n: number of nodes, an integer >= 1.

    Returns:
        The hops, powers of 2 (empty for n = 1).

    Raises:
        InputError: if ``n`` is not an integer >= 1 (raised by the shared check).
    """
    _check(n, "paper")
    if n == 1:
        return []
    m = (n - 1).bit_length() - 1
    return [1 << i for i in range(m + 1)]


def sgp_offsets(n: int) -> list[int]:
    """Offsets (mod n) of rank 0's SGP peer list, in cycling order.

    >>> sgp_offsets(20)
    [1, 19, 2, 18, 4, 16, 8, 12]

    Args:
        n: number of nodes, an integer >= 1.

    Returns:
        The nonzero offsets, without duplicates.
    """
    out = []
    for h in exponential_hops(n):
        for o in (h % n, (-h) % n):
            if o not in out and o != 0:
                out.append(o)
    return out


def period(n: int, variant: str = "paper") -> int:
    """Number of iterations after which the graph sequence repeats (at least 1).

    Args:
        n: number of nodes, an integer >= 1.
        variant: ``"paper"`` or ``"sgp"``.

    Returns:
        The period, >= 1.

    Raises:
        InputError: if ``n`` is not an integer >= 1 or the variant is unknown.
    """
    _check(n, variant)
    return max(1, len(exponential_hops(n) if variant == "paper" else sgp_offsets(n)))


def send_offset(n: int, k: int, variant: str = "paper") -> int:
    """Offset o such that every node j sends to ``(j + o) mod n`` at iteration k (0: nobody sends).

    Args:
        n: number of nodes, an integer >= 1.
        k: the iteration, >= 0.
        variant: ``"paper"`` or ``"sgp"``.

    Returns:
        The offset, in [0, n).

    Raises:
        InputError: if ``n`` is not an integer >= 1 or the variant is unknown.
    """
    _check(n, variant)
    offs = exponential_hops(n) if variant == "paper" else sgp_offsets(n)
    return offs[k % len(offs)] % n if offs else 0


def mixing_matrix(n: int, k: int, variant: str = "paper", *, dtype=torch.float64, device=None) -> torch.Tensor:
    """``P^k`` (n x n): ``x^{k+1}_i = sum_j P^k_{ij} x^{k+1/2}_j`` (node i receives from j).

    Args:
        n: number of nodes, an integer >= 1.
        k: the iteration, >= 0.
        variant: ``"paper"`` or ``"sgp"``.
        dtype: the matrix's dtype.
        device: the matrix's device (None: the default).

    Returns:
        The n x n mixing matrix (the identity where nobody sends).

    Raises:
        InputError: if ``n`` is not an integer >= 1 or the variant is unknown.
    """
    o = send_offset(n, k, variant)
    P = torch.zeros(n, n, dtype=dtype, device=device)
    if o == 0:
        return P + torch.eye(n, dtype=dtype, device=device)
    j = torch.arange(n, device=device)
    P[j, j] = 0.5
    P[(j + o) % n, j] += 0.5
    return P
