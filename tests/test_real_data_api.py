"""What real data needs of the API (docs/how-to/reproduce-papers.md): tables with text columns, a classification loss
and accuracy, test metrics, a regulariser that sees the parameters, eps inf for zero noise, the DIFF2
degenerate case refused, DiceSGD's note against DP-SGD, and the experiments' extra refused cleanly."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import dpcalib.mechanisms as M
import dpcalib.optim as O

ROOT = Path(__file__).resolve().parents[1]
TABLE = {"carat": [0.2, 0.3, 1.1, 0.7, 0.5, 2.0],
         "cut": ["Ideal", "Fair", "Good", "Ideal", "Premium", "Fair"],
         "depth": [61.0, 60.0, 62.5, 59.0, 61.5, 63.0]}
PRICE = [300.0, 350.0, 4000.0, 2500.0, 1500.0, 9000.0]


# ---- tables with text columns ---------------------------------------------------------------------
def test_ordinal_columns_follow_the_given_order_and_are_standardised():
    order = ["Fair", "Good", "Premium", "Ideal"]
    d = O.data.prepare(TABLE, PRICE, categories={"cut": order}, test_fraction=0.0, standardize=False,
                       scale_target=False, dtype=torch.float64)
    assert d.columns == ("carat", "cut", "depth")
    # every record is in the training set (test_fraction 0); compare as sets of rows
    rows = {tuple(r) for r in d.x_train.tolist()}
    want = {(c, float(order.index(k)), dp) for c, k, dp in zip(TABLE["carat"], TABLE["cut"], TABLE["depth"])}
    assert rows == want
    z = O.data.prepare(TABLE, PRICE, categories={"cut": order}, test_fraction=0.0, dtype=torch.float64)
    torch.testing.assert_close(z.x_train.mean(0), torch.zeros(3, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(z.x_train.std(0, unbiased=False), torch.ones(3, dtype=torch.float64))


def test_sorted_order_without_categories_and_onehot_columns_stay_zero_one():
    d = O.data.prepare(TABLE, PRICE, categorical="onehot", test_fraction=0.0, dtype=torch.float64)
    assert d.columns == ("carat", "cut=Fair", "cut=Good", "cut=Ideal", "cut=Premium", "depth")
    hot = d.x_train[:, 1:5]
    assert set(hot.unique().tolist()) == {0.0, 1.0} and torch.all(hot.sum(1) == 1)
    ordinal = O.data.encode_table(TABLE)[0][:, 1]
    assert ordinal.tolist() == [2.0, 0.0, 1.0, 2.0, 3.0, 0.0]            # Fair, Good, Ideal, Premium


def test_text_columns_are_refused_or_named_in_one_line():
    with pytest.raises(ValueError, match=r"column 'cut' is not numeric .*categorical='ordinal' or 'onehot'"):
        O.data.prepare(TABLE, PRICE, categorical="refuse")
    with pytest.raises(ValueError, match=r"categorical='binary' is not allowed"):
        O.data.prepare(TABLE, PRICE, categorical="binary")
    with pytest.raises(ValueError, match=r"categories\['cut'\] .*\['Premium'\]"):
        O.data.prepare(TABLE, PRICE, categories={"cut": ["Fair", "Good", "Ideal"]})
    with pytest.raises(ValueError, match=r"columns \['colour'\]"):
        O.data.prepare(TABLE, PRICE, categories={"colour": ["D"]})
    with pytest.raises(ValueError, match=r"y is not allowed for task='regression'"):
        O.data.prepare(TABLE, TABLE["cut"])


@pytest.mark.parametrize("x,y,kw,needle", [
    ({"a": [1.0, 2, 3, 4], "c": ["x", None, "y", "x"]}, [1.0, 2, 3, 4], {}, r"column 'c' has missing values"),
    ({"a": [1.0, 2, 3, 4], "c": ["x", float("nan"), "y", "x"]}, [1.0, 2, 3, 4], {}, r"column 'c' has missing values"),
    ({"a": [1.0, 2, 3], "b": [1.0, 2]}, [1.0, 2, 3], {}, r"columns have different lengths \[2, 3\]"),
    ({"a": np.zeros((4, 2))}, [1.0, 2, 3, 4], {}, r"column 'a' is not one-dimensional"),
    ({"a": np.array([1 + 1j, 2, 3, 4])}, [1.0, 2, 3, 4], {}, r"column 'a' holds complex numbers"),
    ({"c": ["F", "G", "F", "G"]}, [1.0, 2, 3, 4], {"categories": {"c": "FG"}}, r"categories\['c'\]='FG' .*a list"),
    ({"c": ["F", "G", "F", "G"]}, [1.0, 2, 3, 4], {"categories": ["c"]}, r"categories=\['c'\] .*a dict"),
    ({"a": [1.0, 2, 3, 4]}, [0, 1, float("nan"), 1], {"task": "classification"}, r"y is not allowed: .*missing or non-finite"),
    ({"a": [1.0, 2, 3, 4]}, ["a", None, "b", "a"], {"task": "classification"}, r"y is not allowed: .*missing or non-finite"),
    ({"a": [1.0, math.inf, 3, 4]}, [1.0, 2, 3, 4], {}, r"NaN or infinite"),
    (np.arange(4.0), [1.0, 2, 3, 4], {}, r"expected a table of shape \(n, d\), got shape \(4,\)"),
])
def test_a_table_that_cannot_be_coded_is_refused_naming_the_column(x, y, kw, needle):
    with pytest.raises(ValueError, match=needle):
        O.data.prepare(x, y, **kw)


def test_a_column_near_1e300_is_standardised_not_zeroed():
    d = O.data.prepare({"a": [1e300, -1e300, 1.0, 2.0]}, [1.0, 2, 3, 4], test_fraction=0.0, dtype=torch.float64)
    assert sorted(round(v, 6) for v in d.x_train[:, 0].tolist()) == [-1.414214, 0.0, 0.0, 1.414214]


def test_a_numeric_array_is_prepared_as_before():
    x = np.arange(20.0).reshape(10, 2)
    d = O.data.prepare(x, np.arange(10.0), seed=3)
    assert d.columns == ("0", "1") and d.x_train.shape == (8, 2) and d.classes is None


def test_text_labels_are_coded_for_classification():
    d = O.data.prepare({"carat": TABLE["carat"]}, TABLE["cut"], task="classification", test_fraction=0.0)
    assert d.classes == ("Fair", "Good", "Ideal", "Premium") and d.y_train.dtype == torch.long
    assert sorted(d.y_train.tolist()) == [0, 0, 1, 2, 2, 3]


# ---- loss, accuracy, test metrics ---------------------------------------------------------------
def test_cross_entropy_is_torch_s_per_example_loss():
    g = torch.Generator().manual_seed(0)
    logits, labels = torch.randn(7, 4, generator=g, dtype=torch.float64), torch.tensor([0, 3, 1, 1, 2, 0, 3])
    want = -torch.log_softmax(logits, 1)[torch.arange(7), labels]
    torch.testing.assert_close(O.cross_entropy_loss(logits, labels), want)
    s, b = torch.randn(5, 1, generator=g, dtype=torch.float64), torch.tensor([1, 0, 0, 1, 1])
    sign = 2.0 * b.double() - 1.0
    torch.testing.assert_close(O.cross_entropy_loss(s, b), torch.log1p(torch.exp(-sign * s[:, 0])))
    torch.testing.assert_close(O.cross_entropy_loss(s[:, 0], b.bool()), torch.log1p(torch.exp(-sign * s[:, 0])))
    assert O.accuracy(logits, labels) == pytest.approx(float((logits.argmax(1) == labels).double().mean()))
    assert O.accuracy(s, b) == pytest.approx(float(((s[:, 0] > 0).long() == b).double().mean()))


def _digits_like(n=60, d=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return x, y


def test_evaluate_reports_test_loss_and_accuracy_on_both_splits():
    x, y = _digits_like()
    xt, yt = _digits_like(25, seed=1)
    torch.manual_seed(0)
    model = nn.Linear(5, 1).double()
    mech = M.DPGD(3, 1, len(x))
    opt = O.DPGD(model, O.cross_entropy_loss, [(x, y)], mech, {"sigma1": 0.0}, C1=1.0, lr=0.5)
    m = opt.evaluate(test=(xt, yt), metrics={"accuracy": O.accuracy})
    with torch.no_grad():
        assert m["loss"] == pytest.approx(float(O.cross_entropy_loss(model(x), y).mean()))
        assert m["test_loss"] == pytest.approx(float(O.cross_entropy_loss(model(xt), yt).mean()))
        assert m["train_accuracy"] == O.accuracy(model(x), y) and m["test_accuracy"] == O.accuracy(model(xt), yt)
    opt.run(progress=False, test=(xt, yt), metrics={"accuracy": O.accuracy}, log_every=1)
    assert [k for k in ("test_loss", "train_accuracy", "test_accuracy") if k in opt.metrics[-1]] == \
        ["test_loss", "train_accuracy", "test_accuracy"]
    with pytest.raises(ValueError, match="test is not allowed"):
        opt.evaluate(test=(xt, yt[:3]))
    with pytest.raises(ValueError, match=r"metrics\['acc'\]"):
        opt.evaluate(metrics={"acc": 0.5})


# ---- a regulariser that sees the parameters -------------------------------------------------------
def flat(model):
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


def nonconvex(params):
    return 1e-2 * sum((w * w / (1.0 + w * w)).sum() for w in params.values())


def _objective_grad(model, x, y, w, lam_fn):
    """The regularised objective's gradient by plain autograd on the whole model (the oracle)."""
    model.zero_grad()
    f = (O.cross_entropy_loss(model(x), y) * w).sum() + lam_fn(dict(model.named_parameters()))
    f.backward()
    return float(f.detach()), torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def test_the_regularised_objective_and_its_gradient_match_autograd():
    x, y = _digits_like()
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 1)).double()
    opt = O.DPGD(model, O.cross_entropy_loss, [(x, y)], M.DPGD(3, 1, len(x)), {"sigma1": 0.0}, C1=1.0, lr=0.5,
                 regularizer=nonconvex)
    m = opt.evaluate()
    f, g = _objective_grad(model, x, y, torch.full((len(x),), 1.0 / len(x), dtype=torch.float64), nonconvex)
    assert m["loss"] == pytest.approx(f, rel=1e-12)
    assert m["grad_norm"] == pytest.approx(float(g.norm()), rel=1e-12)
    r, gr = opt.regularizer_value_and_grad(opt.params())
    with torch.no_grad():
        assert float(r) == pytest.approx(float(nonconvex(dict(model.named_parameters()))), rel=1e-12)


def test_updates_descend_on_the_regularised_objective():
    """Without noise and clipping, DP-GD with a regulariser is plain GD on f + r; DP-SGD at q = 1 too."""
    x, y = _digits_like()
    w = torch.full((len(x),), 1.0 / len(x), dtype=torch.float64)
    torch.manual_seed(2)
    model, oracle = nn.Linear(5, 1).double(), nn.Linear(5, 1).double()
    oracle.load_state_dict(model.state_dict())
    opt = O.DPGD(model, O.cross_entropy_loss, [(x, y)], M.DPGD(4, 1, len(x)), {"sigma1": 0.0}, C1=math.inf, lr=0.7,
                 regularizer=nonconvex)
    opt.run(progress=False)
    for _ in range(4):
        _, g = _objective_grad(oracle, x, y, w, nonconvex)
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(torch.nn.utils.parameters_to_vector(oracle.parameters()) - 0.7 * g,
                                                oracle.parameters())
    torch.testing.assert_close(flat(model), torch.nn.utils.parameters_to_vector(oracle.parameters()).detach())
    # DP-SGD, full batch (q = 1), no noise, no clipping: lr/B * (sum of gradients + B grad r) = GD on mean + r
    torch.manual_seed(2)
    sgd = nn.Linear(5, 1).double()
    o2 = O.DPSGD(sgd, O.cross_entropy_loss, (x, y), M.DPSGD(1.0, 4), {"noise_multiplier": 0.0}, C=math.inf, lr=0.7,
                 regularizer=nonconvex)
    o2.run(progress=False)
    torch.testing.assert_close(flat(sgd), flat(model))


def test_a_regulariser_is_refused_where_it_is_not_applied():
    x, y = _digits_like()
    with pytest.raises(ValueError, match="regularizer is not allowed for diff2-bvr"):
        mech = M.DIFF2BVR(4, 2, 1, len(x), 10, 2)
        O.DIFF2BVR(nn.Linear(5, 1).double(), O.cross_entropy_loss, [(x, y)], mech, {"sigma1": 0.0, "sigma2": 0.0,
                   "sigma3": 0.0}, C1=1.0, lr=0.1, regularizer=nonconvex)
    with pytest.raises(ValueError, match="regularizer=3 is not allowed"):
        O.DPGD(nn.Linear(5, 1).double(), O.cross_entropy_loss, [(x, y)], M.DPGD(2, 1, len(x)), {"sigma1": 0.0},
               C1=1.0, lr=0.1, regularizer=3)


# ---- eps of a noiseless run -----------------------------------------------------------------------
def test_zero_noise_spends_infinite_epsilon_with_or_without_delta():
    x, y = _digits_like()
    opt = O.DPGD(nn.Linear(5, 1).double(), O.cross_entropy_loss, [(x, y)], M.DPGD(2, 1, len(x)), {"sigma1": 0.0},
                 C1=1.0, lr=0.1)
    assert opt.epsilon_spent() == 0.0                        # nothing released yet
    opt.run(progress=False)
    assert opt.epsilon_spent() == math.inf and opt.epsilon_spent(1e-5) == math.inf
    assert opt.metrics[-1]["epsilon"] == math.inf            # was nan without a delta
    noisy = O.DPGD(nn.Linear(5, 1).double(), O.cross_entropy_loss, [(x, y)], M.DPGD(2, 1, len(x)), {"sigma1": 1.0},
                   C1=1.0, lr=0.1)
    noisy.run(progress=False)
    with pytest.raises(ValueError, match="delta=None is not allowed"):
        noisy.epsilon_spent()


# ---- DiceSGD against DP-SGD --------------------------------------------------------------------------
def test_dicesgd_notes_how_far_its_sound_noise_is_above_dp_sgd():
    mech = M.DiceSGD(1437, 64, 449, C1=1.0, C2=1.0)
    rep = mech.calibrate(2.0, 1e-5)
    sgd = M.DPSGD(64 / 1437, 449).calibrate(2.0, 1e-5)                   # the independent route
    tight_avg = sgd.noise["noise_multiplier"] * 1.0 / 64
    # DP-SGD's noise in the note is the RDP one: at least the tight one, within a few per cent
    assert tight_avg <= rep.notes["dp_sgd_sigma1"] <= 1.1 * tight_avg
    assert rep.notes["ratio_to_dp_sgd"] == pytest.approx(rep.noise["sigma1"] / rep.notes["dp_sgd_sigma1"])
    assert rep.notes["ratio_to_dp_sgd"] > 1000                           # C2 = C1: thousands of times
    assert re.search(r"is 2\.4\de\+03x DP-SGD's noise .*Assumptions 3\.4-3\.5", rep.notes["versus_dp_sgd"])
    from dpcalib.cli import main

    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["calibrate", "dicesgd", "--n", "1437", "--batch-size", "64", "--steps", "449",
                     "--epsilon", "2", "--delta", "1e-5"]) == 0
    assert "note        sigma1 = 85.06 is 2.44e+03x DP-SGD's" in out.getvalue()
    # where no DP-SGD noise meets the target (its accountant gives up), the calibration still answers
    far = M.DiceSGD(10**9, 1, 10**6).calibrate(1e-3, 1e-12)
    assert far.noise["sigma1"] > 0 and far.notes["ratio_to_dp_sgd"] is None and "versus_dp_sgd" not in far.notes


# ---- the experiments' extra ---------------------------------------------------------------------------
SCRIPTS = sorted((ROOT / "benchmarks" / "papers").glob("*_vs_*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_experiment_scripts_exit_2_naming_the_extra_without_it(script):
    hide = ("import importlib.util, runpy, sys; f = importlib.util.find_spec; "
            "importlib.util.find_spec = lambda n, *a: None if n == 'sklearn' else f(n, *a); "
            f"sys.argv = [{str(script)!r}]; runpy.run_path({str(script)!r}, run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, cwd=ROOT, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2, r.stderr[-2000:]
    # (sklearn is hidden; without the extra the other packages are missing too)
    assert re.search(r"the 'experiments' extra is not installed \(missing: sklearn[^)]*\): "
                     r"pip install -e '\.\[experiments\]'", r.stderr), r.stderr
    assert "Traceback" not in r.stderr


def test_the_docs_block_runs():
    text = (ROOT / "docs" / "optimizers.md").read_text()
    block = next(b for b in re.findall(r"^```python\n(.*?)^```", text, re.S | re.M) if "O.cross_entropy_loss" in b)
    env: dict = {}
    exec(compile(block, "docs/optimizers.md", "exec"), env)
    assert env["d"].columns == ("carat", "cut")
    assert env["opt"].epsilon_spent() == math.inf
    assert 0.0 <= env["opt"].metrics[-1]["test_accuracy"] <= 1.0 and "train_accuracy" in env["opt"].metrics[-1]


# ---- the engine: a regulariser in the user's loop ---------------------------------------------------
@pytest.mark.parametrize("algorithm", ["dp-sgd", "dicesgd", "dp-srm"])
def test_the_engine_adds_the_regularisers_gradient_as_the_reference_does(algorithm):
    from tests import engine_setup as S

    net, ref_net = S.copies()
    x, y = S.data()
    ref = S.reference(algorithm, ref_net, x, y, regularizer=nonconvex)
    engine, m, opt, crit, loader = S.private(algorithm, net, x, y, regularizer=nonconvex)
    if algorithm == "dp-srm":
        ref.step()
    _, worst = S.beside_reference(ref, net, ref_net, m, opt, crit, loader)
    assert worst < 1e-6
    # and the regulariser moved the run: without it the iterates differ
    plain, _ = S.copies()
    _, m2, opt2, crit2, loader2 = S.private(algorithm, plain, x, y)
    S.loop(m2, opt2, crit2, loader2)
    assert float((S.flat(plain) - S.flat(net)).abs().max()) > 1e-8


def test_a_regulariser_added_to_the_loss_is_refused_not_dropped():
    from tests import engine_setup as S

    net, _ = S.copies()
    x, y = S.data()
    _, m, opt, crit, loader = S.private("dp-sgd", net, x, y)
    xb, yb = next(iter(loader))
    opt.zero_grad()
    (crit(m(xb), yb) + nonconvex(dict(net.named_parameters()))).backward()
    with pytest.raises(ValueError, match=r"a gradient reached the parameters outside the private forward .*"
                                         r"regularizer=fn\(params\)"):
        opt.step()
    # zero_grad(set_to_none=False) between steps (the last step's .grad zeroed in place) is fine
    net, _ = S.copies()
    _, m, opt, crit, loader = S.private("dp-sgd", net, x, y)
    for i, (xb, yb) in enumerate(loader):
        opt.zero_grad(set_to_none=False)
        crit(m(xb), yb).backward()
        opt.step()
        if i == 2:
            break
    assert opt.round == 3
    with pytest.raises(ValueError, match="regularizer=0.1 is not allowed"):
        S.private("dp-sgd", S.copies()[0], x, y, regularizer=0.1)


def test_the_cli_refuses_a_diff2_run_that_would_be_dp_gd(capsys):
    from dpcalib.cli import main

    rc = main(["train", "diff2-gd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "4", "--world-size", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "--restart-interval=1 is not allowed for diff2-gd: every round would be a restart" in err
    assert "Traceback" not in err
