"""What ``secure_mode`` costs, measured side by side in one process: the noise of one release
(``torch.randn`` added to the value, against the exact rounded Gaussian of
:func:`dpcalib.optim.randomness.gaussian_release`), the random bits themselves (ChaCha20 against
``os.urandom``), and one DP-SGD step of the engine in a user's loop (``zero_grad``, forward, mean loss,
``backward``, ``step``) with ``PrivacyEngine()`` against ``PrivacyEngine(secure_mode=True)`` on the
benchmark models (benchmarks/models.py).  The contenders take turns, ``--rounds`` times; each figure is
the median over the rounds with the spread (min-max of the per-round ratios) beside it.

    python -m benchmarks.bench_secure_mode [--rounds 5] [--threads 1] [--dims 100000,1000000]
"""

from __future__ import annotations

import argparse
import os
import statistics

from benchmarks.timing import median_time


def _noise(dims, rounds):
    import torch

    from dpcalib.optim.randomness import SecureGenerator, gaussian_release

    g, s = torch.Generator().manual_seed(0), SecureGenerator.from_entropy()
    rows = []
    for d in dims:
        x = torch.randn(d)
        plain = lambda: x + 0.7 * torch.randn(d, generator=g)      # noqa: E731
        secure = lambda: gaussian_release(s, x, 0.7)               # noqa: E731
        ratios, tp, ts = [], [], []
        for _ in range(rounds):
            a, b = median_time(plain, 5), median_time(secure, 5)
            tp.append(a), ts.append(b), ratios.append(b / a)
        rows.append((f"noise, d = {d:,}", statistics.median(tp), statistics.median(ts), ratios))
    return rows


def _bits(rounds):
    from dpcalib.optim.randomness import SecureGenerator

    s = SecureGenerator.from_entropy()
    n = 8 * 2 ** 20
    ratios, tu, tc = [], [], []
    for _ in range(rounds):
        a, b = median_time(lambda: os.urandom(n), 5), median_time(lambda: s.bytes(n), 5)
        tu.append(a), tc.append(b), ratios.append(b / a)
    return [("8 MiB of bits: ChaCha20 vs os.urandom", statistics.median(tu), statistics.median(tc), ratios)]


def _steps(kinds, rounds):
    import warnings

    import torch
    from torch import nn

    import dpcalib.optim as O
    from benchmarks import models as BM

    warnings.simplefilter("ignore")
    rows = []
    for kind in kinds:
        runs = {}
        for secure in (False, True):
            model = BM.model(kind)
            x, y = BM.batch(kind, 64)
            loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64)
            engine = O.PrivacyEngine(secure_mode=secure)
            m, opt, _ = engine.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                                            data_loader=loader, noise_multiplier=1.0, max_grad_norm=1.0,
                                            allow_overspend=True, steps=10 ** 6)
            crit = nn.CrossEntropyLoss()

            def step(m=m, opt=opt, crit=crit, x=x, y=y):
                opt.zero_grad()
                crit(m(x), y).backward()
                opt.step()
            runs[secure] = step
        d = sum(p.numel() for p in BM.model(kind).parameters())
        ratios, tp, ts = [], [], []
        for _ in range(rounds):
            a, b = median_time(runs[False], 3), median_time(runs[True], 3)
            tp.append(a), ts.append(b), ratios.append(b / a)
        rows.append((f"engine step, {kind} (d = {d:,}, batch 64)", statistics.median(tp), statistics.median(ts),
                     ratios))
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dims", default="100000,1000000")
    p.add_argument("--models", default="mlp,cnn,transformer")
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(a.threads)
    rows = _bits(a.rounds) + _noise([int(d) for d in a.dims.split(",")], a.rounds) + _steps(a.models.split(","),
                                                                                           a.rounds)
    print("| what | plain | secure | secure / plain (spread over rounds) |")
    print("|---|---|---|---|")
    for name, tp, ts, ratios in rows:
        print(f"| {name} | {tp * 1e3:.3g} ms | {ts * 1e3:.3g} ms | **{statistics.median(ratios):.2f}x** "
              f"({min(ratios):.2f}-{max(ratios):.2f}) |")


if __name__ == "__main__":
    main()
