"""Which of the models users bring (benchmarks/user_models.py, the 35 cases of tests/test_models_matrix.py) each of
Opacus 1.6's modes -- hooks, functorch, ghost clipping -- clips correctly, with and without Opacus's
``ModuleValidator.fix``, beside dpcalib's engine with and without dpcalib's fixer: each mode's clipped sum (no
noise, one batch of 6 records, C = 0.5) against the naive per-record float64 loop; "ok" within 1e-5 relative
(2e-2 in bfloat16 / float16), else the relative error or the first line of the error.  Acceptance: every case
some Opacus mode clips correctly, dpcalib clips correctly.

    python -m benchmarks.opacus_cases [--out benchmarks/results/user_models_opacus.md]
"""

from __future__ import annotations

import argparse
import copy
import sys
import warnings

import torch
from torch import nn

from benchmarks import user_models as U

N, C = 6, 0.5
MODES = ("hooks", "functorch", "ghost")


def _cast(obj, dtype):
    from dpcalib.optim.clipping.calls import rebuild
    return rebuild(obj, lambda t: t.to(dtype) if t.is_floating_point() else t)


def _naive(case, model, batch):
    m = copy.deepcopy(getattr(model, "_orig_mod", model)).double()
    ps = [p for p in m.parameters() if p.requires_grad]
    args, kwargs, y = batch
    total = 0.0
    for i in range(N):
        a, k, t = U.one_record(args, kwargs, y, i, case.dim, case.packed)
        a, k = _cast((a, k), torch.float64)
        v = torch.cat([g.reshape(-1) for g in torch.autograd.grad(case.loss(m(*a, **k), t), ps)])
        total = total + v * min(1.0, C / float(v.norm()))
    return total, [n for n, p in m.named_parameters() if p.requires_grad]


def _ctx(case):
    return torch.autocast("cpu", dtype=case.autocast) if case.autocast else torch.autocast("cpu", enabled=False)


class _Criterion:
    """The case's loss as a criterion whose ``reduction`` Opacus's ghost mode can switch to "none"."""

    def __init__(self, case):
        self.case, self.reduction = case, "mean"

    def __call__(self, out, y):
        logits = out.logits if hasattr(out, "logits") else out
        return nn.functional.cross_entropy(logits.float(), y, reduction=self.reduction)


def _opacus(case, model, batch, mode):
    """Opacus's clipped sum under its names, ordered as the model's trained parameters (by name)."""
    from opacus import GradSampleModule
    from opacus.grad_sample import GradSampleModuleFastGradientClipping
    from opacus.optimizers import DPOptimizer, DPOptimizerFastGradientClipping
    from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping

    args, kwargs, y = batch
    trained = [p for p in model.parameters() if p.requires_grad]
    if mode == "ghost":
        if case.loss is U._hf_loss:
            raise RuntimeError("n/a: the model computes its own loss (ghost needs per-record losses)")
        gsm = GradSampleModuleFastGradientClipping(model, batch_first=case.dim == 0, max_grad_norm=C,
                                                   use_ghost_clipping=True, loss_reduction="mean")
        opt = DPOptimizerFastGradientClipping(torch.optim.SGD(trained, lr=0.0), noise_multiplier=0.0, max_grad_norm=C,
                                              expected_batch_size=N, loss_reduction="mean")
        crit = DPLossFastGradientClipping(gsm, opt, _Criterion(case), loss_reduction="mean")
        with _ctx(case):
            loss = crit(gsm(*args, **kwargs), y)
    else:
        gsm = GradSampleModule(model, batch_first=case.dim == 0, loss_reduction="mean", force_functorch=mode == "functorch")
        opt = DPOptimizer(torch.optim.SGD(trained, lr=0.0), noise_multiplier=0.0, max_grad_norm=C, expected_batch_size=N,
                          loss_reduction="mean")
        with _ctx(case):
            loss = case.loss(gsm(*args, **kwargs), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return {n: p.grad.double() * N for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}


def _dpcalib(case, model, batch):
    from dpcalib.optim.engine import PrivateModule

    args, kwargs, y = batch
    pm = PrivateModule(model, batch_first=case.dim == 0)
    with _ctx(case):
        loss = case.loss(pm(*args, **kwargs), y)
    loss.backward()
    flat = pm.captures[-1].clipped_sum(C).double()
    out, i = {}, 0
    for n, p in pm.named:
        out[n] = flat[i:i + p.numel()].view_as(p)
        i += p.numel()
    return out


def _verdict(case, got: dict, ref, names) -> str:
    import re

    def key(n):                       # Opacus's fixer renames an LSTM's weights (l0.ih.weight -> weight_ih_l0)
        return re.sub(r"^(_module\.|_orig_mod\.)+", "", n)
    got = {key(n): v for n, v in got.items()}
    if set(got) != set(names):
        return "other parameters"
    flat = torch.cat([got[n].reshape(-1) for n in names])
    rel = float((flat - ref).norm() / ref.norm())
    tol = 2e-2 if (case.autocast or case.dtype != torch.float32) else 1e-5
    return "ok" if rel <= tol else f"{rel:.1e}"


def _try(fn) -> str:
    try:
        return fn()
    except Exception as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"fails: {type(exc).__name__}: {msg[:90]}"


def row(case) -> dict:
    from dpcalib.optim.clipping import ModuleValidator as Ours
    from opacus.validators import ModuleValidator as Theirs

    def fresh():
        model = case.build()
        batch = case.batch(N, 0)
        if case.dtype != torch.float32:
            model = model.to(case.dtype)
            batch = (*_cast(batch[:2], case.dtype), batch[2])
        return model, batch
    model, batch = fresh()
    ref, names = _naive(case, model, batch)
    out = {}
    for mode in MODES:
        for fixed in (False, True):
            def run(mode=mode, fixed=fixed):
                m, b = fresh()
                if fixed:
                    m = Theirs.fix(m)
                    r, ns = _naive(case, m, b)
                    return _verdict(case, _opacus(case, m, b, mode), r, ns)
                return _verdict(case, _opacus(case, m, b, mode), ref, names)
            out[f"opacus {mode}" + (" + fix" if fixed else "")] = _try(run)
    for fixed in (False, True):
        def ours(fixed=fixed):
            m, b = fresh()
            if fixed:
                m = Ours.fix(m)
                r, ns = _naive(case, m, b)
                return _verdict(case, _dpcalib(case, m, b), r, ns)
            return _verdict(case, _dpcalib(case, m, b), ref, names)
        out["dpcalib" + (" + fix" if fixed else "")] = _try(ours)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(2)
    import datetime
    import importlib.metadata as md

    cols = [f"opacus {m}" + f for m in MODES for f in ("", " + fix")] + ["dpcalib", "dpcalib + fix"]
    vers = ", ".join(f"{n} {md.version(n)}" for n in ("torch", "transformers", "peft", "opacus"))
    lines = [f"`python -m benchmarks.opacus_cases {' '.join(argv if argv is not None else sys.argv[1:])}` "
             f"({datetime.date.today().isoformat()}; {vers}): each mode's clipped sum (no noise, {N} records, C = {C}) "
             "against the naive float64 loop; ok within 1e-5 relative (2e-2 in bfloat16 / float16)", "",
             "| case | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    print("\n".join(lines), flush=True)
    gaps = []
    for case in U.CASES:
        if case.needs and not (U.HF and (case.needs == "hf" or U.PEFT)):
            continue
        r = row(case)
        line = f"| {case.name} | " + " | ".join(r[c] for c in cols) + " |"
        lines.append(line)
        print(line, flush=True)
        if any(r[c] == "ok" for c in cols if c.startswith("opacus")) and not any(r[c] == "ok" for c in cols
                                                                                 if c.startswith("dpcalib")):
            gaps.append(case.name)
    lines.append(f"\ncases some Opacus mode clips correctly and dpcalib does not: {len(gaps)} {gaps}")
    print(lines[-1])
    if a.out:
        with open(a.out, "w") as f:
            f.write("# Opacus on the models users bring: each clipping mode, with and without its fix\n\n"
                    + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
