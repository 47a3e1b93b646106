"""One DP-SGD step in a user's loop on the models users bring -- tiny BERT and GPT-2 (full and LoRA), an LSTM
classifier, a ResNet-like GroupNorm CNN and a ViT-like encoder (Hugging Face models built from configs, no
download), and an MLP over positions with custom modules' own elementwise parameters (``x * scale + shift``: the
fallback that remains, dpcalib's per-module vmap) -- through dpcalib's engine and through Opacus 1.6's modes
(hooks, functorch, ghost clipping; an LSTM through Opacus's fixer, which makes it a DPLSTM).

Every contender first checks its own clipped sum (no noise, one batch) against the naive float64 per-record
loop: a mode whose sum is more than 1e-4 relative from it is reported as wrong and is not a candidate for
"Opacus's best correct mode" (the fastest of the correct ones).  Then each contender runs in its own process
(peak memory is that process's max RSS, and the steps' own peak above the RSS before them, sampled after the
warm-up), on the
same model, batch and seed, with SGD as the wrapped optimizer; time is the median of ``--steps`` steps after
two warm-up steps.  The contenders take turns, ``--rounds`` times; each figure is the median over the rounds,
with the spread (min-max over the rounds) beside it.  One run: read the ratios, measured side by side.

    python -m benchmarks.bench_user_models [--models bert,bert-lora,gpt2,gpt2-lora,lstm,resnet,vit,custom] [--rounds 3]
        [--steps 5] [--threads 2] [--device cpu|cuda] [--autocast bf16] [--out benchmarks/results/user_models.md]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import subprocess
import sys

from benchmarks.timing import median_time

MODELS = ("bert", "bert-lora", "gpt2", "gpt2-lora", "lstm", "resnet", "vit", "custom")
CONTENDERS = ("dpcalib", "opacus-hooks", "opacus-functorch", "opacus-ghost")
B, T, C, Z, LR = 32, 32, 1.0, 1.0, 0.05


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


class _Peak:
    """The largest RSS seen while the block runs (sampled every 0.2 ms by a thread: the steps' own peak, after the
    warm-up, which the process's max RSS also counts)."""

    def __enter__(self):
        import threading

        self.peak, self.stop = _rss_mib(), threading.Event()

        def watch():
            while not self.stop.is_set():
                self.peak = max(self.peak, _rss_mib())
                self.stop.wait(0.0002)
        self.thread = threading.Thread(target=watch, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        return False


def build(kind: str, who: str = "dpcalib"):
    """``(model, inputs (kwargs), target, criterion(out, target), lm)``: the model and one batch (Opacus's hooks
    and functorch modes: the LSTM through Opacus's fixer, a DPLSTM with the same weights)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if kind in ("bert", "bert-lora"):
        from transformers import BertConfig, BertForSequenceClassification
        model = BertForSequenceClassification(BertConfig(
            vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
            max_position_embeddings=64, num_labels=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
        ids = torch.randint(3, 1000, (B, T), generator=g)
        inputs, y = {"input_ids": ids, "attention_mask": torch.ones(B, T, dtype=torch.long)}, torch.randint(0, 2, (B,),
                                                                                                              generator=g)
        crit = _Logits(nn.CrossEntropyLoss())
        if kind == "bert-lora":
            model = _lora(model, ["query", "value"], ["classifier"])
        return model, inputs, y, crit, False
    if kind in ("gpt2", "gpt2-lora"):
        from transformers import GPT2Config, GPT2LMHeadModel
        model = GPT2LMHeadModel(GPT2Config(vocab_size=1000, n_embd=128, n_layer=2, n_head=4, n_positions=64,
                                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                           eos_token_id=0, use_cache=False))
        ids = torch.randint(3, 1000, (B, T), generator=g)
        if kind == "gpt2-lora":
            model = _lora(model, ["c_attn"], None)
        return model, {"input_ids": ids}, ids, _NextToken(), True
    if kind == "lstm":
        model = _LSTMClassifier()
        if who in ("opacus-hooks", "opacus-functorch"):
            from opacus.validators import ModuleValidator
            model = ModuleValidator.fix(model)          # nn.LSTM -> DPLSTM (the weights are copied)
        return model, {"ids": torch.randint(0, 1000, (B, T), generator=g)}, torch.randint(0, 2, (B,), generator=g), \
            nn.CrossEntropyLoss(), False
    if kind == "resnet":
        from benchmarks.user_models import ResNet, _gn
        model = ResNet(32, _gn)
        return model, {"x": torch.randn(B, 3, 32, 32, generator=g)}, torch.randint(0, 4, (B,), generator=g), \
            nn.CrossEntropyLoss(), False
    if kind == "custom":                     # custom modules' own elementwise parameters: dpcalib's per-module vmap
        from benchmarks.user_models import Scale
        model = nn.Sequential(nn.Linear(256, 256), Scale(256), nn.GELU(), nn.Linear(256, 256), Scale(256), nn.GELU())
        model = _Pooled(model, 256, 4)
        return model, {"x": torch.randn(B, T, 256, generator=g)}, torch.randint(0, 4, (B,), generator=g), \
            nn.CrossEntropyLoss(), False
    from transformers import ViTConfig, ViTForImageClassification
    model = ViTForImageClassification(ViTConfig(
        image_size=32, patch_size=4, num_channels=3, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=256, num_labels=4, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    return model, {"pixel_values": torch.randn(B, 3, 32, 32, generator=g)}, torch.randint(0, 4, (B,), generator=g), \
        _Logits(nn.CrossEntropyLoss()), False


class _Logits:
    """A criterion on a model output's logits (keeps ``reduction``, which Opacus's ghost mode switches)."""

    def __init__(self, inner):
        self.inner = inner

    @property
    def reduction(self):
        return self.inner.reduction

    @reduction.setter
    def reduction(self, v):
        self.inner.reduction = v

    def __call__(self, out, y):
        return self.inner(out.logits if hasattr(out, "logits") else out, y)


class _NextToken:
    """GPT-2's next-token loss, a mean over every predicted token of the batch (per record: over its tokens)."""

    def __init__(self):
        from torch import nn
        self.inner = nn.CrossEntropyLoss()

    @property
    def reduction(self):
        return self.inner.reduction

    @reduction.setter
    def reduction(self, v):
        self.inner.reduction = v

    def __call__(self, out, ids):
        logits = out.logits if hasattr(out, "logits") else out
        return self.inner(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def _Pooled(trunk, width, classes):
    from torch import nn

    global Pooled

    class Pooled(nn.Module):
        """A trunk over positions, a classifier on the mean over them."""

        def __init__(self):
            super().__init__()
            self.trunk, self.head = trunk, nn.Linear(width, classes)

        def forward(self, x):
            return self.head(self.trunk(x).mean(1))
    Pooled.__qualname__ = "Pooled"
    return Pooled()


def _LSTMClassifier():
    from torch import nn

    global LSTMClassifier

    class LSTMClassifier(nn.Module):
        """Embedding, one LSTM layer, a classifier on the mean over time."""

        def __init__(self):
            super().__init__()
            self.emb, self.rnn, self.head = nn.Embedding(1000, 64), nn.LSTM(64, 128, batch_first=True), nn.Linear(128, 2)

        def forward(self, ids):
            out, _ = self.rnn(self.emb(ids))
            return self.head(out.mean(1))
    LSTMClassifier.__qualname__ = "LSTMClassifier"
    return LSTMClassifier()


def _lora(model, targets, save):
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)
    m = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=targets,
                                         modules_to_save=save))
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.normal_(0.0, 0.02)
    return m


def _naive(model, inputs, y, crit, lm):
    """The clipped sum of the naive float64 loop (one backward per record, clipped at C)."""
    import torch

    m = copy.deepcopy(model).double()
    ps = [p for p in m.parameters() if p.requires_grad]
    total = 0.0
    for i in range(B):
        kw = {k: (v[i:i + 1].double() if v.is_floating_point() else v[i:i + 1]) for k, v in inputs.items()}
        v = torch.cat([t.reshape(-1) for t in torch.autograd.grad(crit(m(**kw), y[i:i + 1]), ps)])
        total = total + v * min(1.0, C / float(v.norm()))
    return total


def contender(kind: str, who: str, noise: float, device: str, autocast: str | None):
    """``(step(), the summed clipped gradient of the last step (noise 0: the clipped sum))``."""
    import torch

    model, inputs, y, crit, lm = build(kind, who)
    model = model.to(device)
    inputs = {k: v.to(device) for k, v in inputs.items()}
    y = y.to(device)
    trained = [p for p in model.parameters() if p.requires_grad]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(autocast)

    def ctx():
        return torch.autocast(device, dtype=dtype) if dtype else torch.autocast(device, enabled=False)
    if who == "dpcalib":
        from dpcalib.optim import PrivacyEngine
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(B, 1)), batch_size=B)
        m, opt, _ = PrivacyEngine().make_private(module=model, optimizer=torch.optim.SGD(trained, lr=LR),
                                                 data_loader=loader, noise_multiplier=noise, max_grad_norm=C,
                                                 steps=10 ** 6)

        def step():
            opt.zero_grad()
            with ctx():
                loss = crit(m(**inputs), y)
            loss.backward()
            opt.step()

        def summed():
            return torch.cat([p.grad.reshape(-1) for _, p in opt.module.named]).double() * opt.kernel.normaliser
        return step, summed
    if who == "opacus-ghost":
        from opacus.grad_sample import GradSampleModuleFastGradientClipping
        from opacus.optimizers import DPOptimizerFastGradientClipping
        from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping

        gsm = GradSampleModuleFastGradientClipping(model, max_grad_norm=C, use_ghost_clipping=True, loss_reduction="mean")
        opt = DPOptimizerFastGradientClipping(torch.optim.SGD(trained, lr=LR), noise_multiplier=noise,
                                              max_grad_norm=C, expected_batch_size=B, loss_reduction="mean")
        inner = crit.inner if hasattr(crit, "inner") else crit
        dploss = DPLossFastGradientClipping(gsm, opt, inner, loss_reduction="mean")

        def step():
            opt.zero_grad()
            with ctx():
                out = gsm(**inputs)
                logits = out.logits if hasattr(out, "logits") else out
                if lm:
                    loss = dploss(logits[:, :-1].reshape(-1, logits.shape[-1]), y[:, 1:].reshape(-1),
                                  shape=(B, T - 1, logits.shape[-1]))
                else:
                    loss = dploss(logits, y)
            loss.backward()
            opt.step()
    else:
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer
        gsm = GradSampleModule(model, loss_reduction="mean", force_functorch=who == "opacus-functorch")
        opt = DPOptimizer(torch.optim.SGD(trained, lr=LR), noise_multiplier=noise, max_grad_norm=C,
                          expected_batch_size=B, loss_reduction="mean")

        def step():
            opt.zero_grad()
            with ctx():
                loss = crit(gsm(**inputs), y)
            loss.backward()
            opt.step()

    def summed():
        return torch.cat([p.grad.reshape(-1) for p in trained]).double() * B
    return step, summed


def _one(kind, who, steps, threads, device, autocast, check):
    import warnings

    import torch

    warnings.simplefilter("ignore")
    torch.set_num_threads(threads)
    out = {"model": kind, "who": who}
    if check:
        import torch
        step, summed = contender(kind, who, 0.0, device, autocast)
        model, inputs, y, crit, lm = build(kind, who)
        ref = _naive(model, inputs, y, crit, lm)
        try:
            step()
            got = summed().cpu()
            out["rel"] = float((got - ref).norm() / ref.norm())
        except Exception as exc:                       # a mode that does not run this model
            out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        return out
    step, _ = contender(kind, who, Z, device, autocast)
    for _ in range(2):                                 # warm-up (dpcalib's first batch surveys the layers)
        step()
    before, watch = _rss_mib(), _Peak()
    with watch:
        t = median_time(step, steps, warmup=0)
    if device == "cuda":
        torch.cuda.synchronize()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    out.update(median_s=t, max_rss_mib=peak, step_peak_mib=max(0.0, watch.peak - before))
    if device == "cuda":
        out["cuda_peak_mib"] = torch.cuda.max_memory_allocated() / 2 ** 20
    return out


def _child(kind, who, a, check=False):
    cmd = [sys.executable, "-m", "benchmarks.bench_user_models", "--child", kind, who, "--steps", str(a.steps),
           "--threads", str(a.threads), "--device", a.device] + (["--autocast", a.autocast] if a.autocast else []) + \
        (["--check"] if check else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        return {"model": kind, "who": who, "error": (r.stderr.strip().splitlines() or ["?"])[-1][:160]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--autocast", default=None, choices=[None, "bf16", "fp16"])
    ap.add_argument("--out", default=None, help="also write the table (markdown) to this file")
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "WHO"), help=argparse.SUPPRESS)
    ap.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(_one(a.child[0], a.child[1], a.steps, a.threads, a.device, a.autocast, a.check)))
        return 0
    import datetime
    import importlib.metadata as md

    vers = ", ".join(f"{n} {md.version(n)}" for n in ("torch", "transformers", "peft", "opacus"))
    head = [f"`python -m benchmarks.bench_user_models {' '.join(argv if argv is not None else sys.argv[1:])}` "
            f"({datetime.date.today().isoformat()}; {vers})", ""]
    lines = head + [f"one DP-SGD step (batch {B}, sequence {T}) in a user loop on {a.device}"
             + (f" under {a.autocast} autocast" if a.autocast else "") + f", {a.threads} threads, each contender in "
             f"its own process, {a.rounds} rounds of turns: medians over the rounds [min-max]", "",
             "| model | contender | clipped sum vs naive float64 loop | step ms [min-max] | max RSS MiB | "
             + ("CUDA max allocated MiB |" if a.device == "cuda" else "steps' own peak MiB |"),
             "|---|---|---|---|---|---|"]
    summary = []
    print("\n".join(lines), flush=True)
    for kind in a.models.split(","):
        checks = {who: _child(kind, who, a, check=True) for who in CONTENDERS}
        tol = 2e-2 if a.autocast else 1e-4          # bf16 / fp16 products: the matrix's bf16 tolerance
        correct = [w for w, r in checks.items() if "rel" in r and r["rel"] <= tol]
        runs = {}
        for _ in range(a.rounds):
            for who in CONTENDERS:
                if who not in correct and who != "dpcalib":
                    continue
                r = _child(kind, who, a)
                if "error" not in r:
                    runs.setdefault(who, []).append(r)
        med = {w: (statistics.median(r["median_s"] for r in rs), min(r["median_s"] for r in rs),
                   max(r["median_s"] for r in rs), statistics.median(r["max_rss_mib"] for r in rs),
                   statistics.median(r.get("cuda_peak_mib", r["step_peak_mib"]) for r in rs)) for w, rs in runs.items()}
        for who in CONTENDERS:
            c = checks[who]
            verdict = (f"{c['rel']:.1e}" + ("" if who in correct else " (wrong)")) if "rel" in c else \
                f"fails: {c.get('error', '?')}"
            t = med.get(who)
            row = (f"| {kind} | {who} | {verdict} | " + (f"{t[0] * 1e3:.1f} [{t[1] * 1e3:.1f}-{t[2] * 1e3:.1f}] | "
                                                         f"{t[3]:.0f} | {t[4]:.0f} |" if t else "- | - | - |"))
            lines.append(row)
            print(row, flush=True)
        best = [w for w in correct if w != "dpcalib" and w in med]
        if best and "dpcalib" in med:
            b = min(best, key=lambda w: med[w][0])
            e = med["dpcalib"]
            summary.append((kind, b, e[0] / med[b][0], e[3] / med[b][3], e[4] / max(med[b][4], 1.0)))
    lines += ["", "| model | Opacus's best correct mode | dpcalib / it: time | max RSS | steps' own peak |", "|---|---|---|---|---|"]
    for kind, b, tr, mr, pr in summary:
        lines.append(f"| {kind} | {b} | {tr:.2f}x | {mr:.2f}x | {pr:.2f}x |")
    if summary:
        ts = [s[2] for s in summary]
        lines.append(f"\nmedian time ratio {statistics.median(ts):.2f}x, largest {max(ts):.2f}x; largest max-RSS ratio "
                     f"{max(s[3] for s in summary):.2f}x")
    print("\n".join(lines[-len(summary) - 4:]))
    if a.out:
        with open(a.out, "w") as f:
            f.write(f"# Per-sample clipping on the models users bring ({a.device})\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
