"""DIFF2-GD at the paper's settings: paper (Prop. 4.1) vs tight (exact GDP, same split) noise.

    python benchmarks/diff2_gd_table.py

Prints a markdown table (used in docs/calibration.md): eps in {3, 5}, delta = 1e-5, R = 2000,
T in {6, 20, 60, 200}, P = 10, n_min = 1651, u = 1.25.
"""

from dpcalib.mechanisms import DIFF2GD


def main() -> None:
    print("| eps | T | sigma1 paper | sigma1 tight | ratio | sigma2 paper | sigma2 tight | ratio | eps of tight (exact GDP) | eps of paper (exact GDP) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for eps in (3.0, 5.0):
        for T in (6, 20, 60, 200):
            m = DIFF2GD(2000, T, 10, 1651)
            p = m.calibrate(eps, 1e-5, method="paper", u=1.25)
            t = m.calibrate(eps, 1e-5, method="tight", u=1.25)
            print(f"| {eps:g} | {T} | {p['sigma1']:.6g} | {t['sigma1']:.6g} | {p['sigma1'] / t['sigma1']:.4f} "
                  f"| {p['sigma2']:.6g} | {t['sigma2']:.6g} | {p['sigma2'] / t['sigma2']:.4f} "
                  f"| {t.achieved_epsilon:.6f} | {p.certified_epsilon:.6f} |")


if __name__ == "__main__":
    main()
