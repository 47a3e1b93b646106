"""The PLD bracket beside dp-accounting's PLD (1e-5) and prv_accountant on 24 Poisson settings.

    python benchmarks/pld_anchors.py

For each (q, z, steps) at delta = 1e-5: dpcalib's [lower, upper]; dp-accounting's PLD at
value_discretization_interval = 1e-5, pessimistic (an upper bound, up to its truncated tails)
and optimistic (a lower bound); prv_accountant's [eps_lower, eps_upper] at eps_error = 0.01.
"consistent" means: every anchor's upper end >= our lower end and every anchor's lower end <=
our upper end (the true eps lies in all the brackets, so they must intersect).
"""

from __future__ import annotations

import itertools
import time

from dp_accounting.pld import privacy_loss_distribution as pld_mod
from prv_accountant import Accountant

from dpcalib.accountant import PoissonSampledGaussianEvent, pld_epsilon

DELTA = 1e-5
SETTINGS = list(itertools.product((0.001, 0.01, 0.1), (0.8, 1.5, 4.0), (10, 300))) + [
    (0.02, 1.0, 1000), (0.004, 0.9, 3000), (0.3, 2.0, 100), (0.5, 5.0, 30), (1.0, 10.0, 20), (0.05, 0.6, 50)]


def main() -> None:
    print("| q | z | steps | dpcalib [lower, upper] | dp-acc. optimistic | dp-acc. pessimistic | PRV [lower, upper] "
          "| consistent | t dpcalib | t dp-acc. | t PRV |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ok_all = True
    for q, z, k in SETTINGS:
        t0 = time.perf_counter()
        b = pld_epsilon([(PoissonSampledGaussianEvent(q, z), k)], DELTA)
        t_o = time.perf_counter() - t0
        t0 = time.perf_counter()
        d = {}
        for pess in (True, False):
            p = pld_mod.from_gaussian_mechanism(z, value_discretization_interval=1e-5,
                                                pessimistic_estimate=pess, sampling_prob=q,
                                                use_connect_dots=pess)
            d[pess] = p.self_compose(k).get_epsilon_for_delta(DELTA)
        t_d = time.perf_counter() - t0
        t0 = time.perf_counter()
        lo, _, up = Accountant(noise_multiplier=z, sampling_probability=q, delta=DELTA, eps_error=0.01,
                               max_compositions=k).compute_epsilon(num_compositions=k)
        t_p = time.perf_counter() - t0
        ok = b.lower <= d[True] + 1e-9 and d[False] <= b.upper + 1e-9 and b.lower <= up and lo <= b.upper
        ok_all &= ok
        print(f"| {q:g} | {z:g} | {k} | [{b.lower:.6f}, {b.upper:.6f}] | {d[False]:.6f} | {d[True]:.6f} "
              f"| [{lo:.6f}, {up:.6f}] | {'yes' if ok else 'NO'} | {t_o:.2f} | {t_d:.2f} | {t_p:.2f} |", flush=True)
    print(f"\nall consistent: {ok_all}")


if __name__ == "__main__":
    main()
