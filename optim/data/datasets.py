"""Data for the reference optimizers: the papers' preprocessing and synthetic data of their shapes.

Preprocessing (DIFF2 Sec. 6 / App. A): standardise every feature to mean 0, std 1;
regression targets divided by max |y| over the whole dataset; random 80 % / 20 % train/test split;
the training set cut into P equal i.i.d. shards (sizes differ by at most one record).

Nothing is downloaded: :func:`load_csv` reads a local file, :func:`synthetic` draws data with the
shape of a paper's dataset (:data:`SHAPES`) from a fixed random "teacher" network.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from ...accountant.validation import InputError

__all__ = ["SHAPES", "TabularData", "prepare", "load_csv", "equal_shards", "synthetic"]

#: name -> (rows, features, task, classes): the datasets of the papers (DIFF2 Sec. 6, DP-SRM and AdaD2P experiments).
SHAPES = {
    "california": (20640, 8, "regression", None),
    "gas_turbine": (36733, 9, "regression", None),
    "blogfeedback": (60021, 280, "regression", None),
    "covtype": (581012, 54, "classification", 7),
    "ijcnn1": (49990, 22, "classification", 2),
}


def equal_shards(x, y, parts: int) -> list:
    """Cut ``(x, y)`` into ``parts`` consecutive shards whose sizes differ by at most one."""
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise InputError(f"parts={parts!r} is not allowed: expected an integer >= 1.")
    n = len(x)
    if parts > n:
        raise InputError(f"parts={parts} is not allowed: expected at most the {n} records.")
    bounds = [(i * n) // parts for i in range(parts + 1)]
    return [(x[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


@dataclass
class TabularData:
    """A prepared dataset: torch tensors, train rows already in random order."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    task: str

    def shards(self, clients: int) -> list:
        """Equal i.i.d. shards of the training set, one per client (DIFF2: P = 10)."""
        return equal_shards(self.x_train, self.y_train, clients)

    def n_min(self, clients: int) -> int:
        """Smallest shard: the n_min the calibration needs."""
        return len(self.x_train) // clients

    @property
    def train(self):
        return self.x_train, self.y_train


def prepare(x, y, *, task: str = "regression", test_fraction: float = 0.2, seed: int = 0,
            standardize: bool = True, scale_target: bool = True, dtype=torch.float32) -> TabularData:
    """The papers' preprocessing of arrays ``x`` (n x d) and ``y`` (n,)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y)
    if x.ndim != 2 or y.ndim != 1 or len(x) != len(y) or len(x) < 2:
        raise InputError(f"x, y are not allowed: expected x of shape (n, d) and y of shape (n,) with n >= 2, "
                         f"got {x.shape} and {y.shape}.")
    if task not in ("regression", "classification"):
        raise InputError(f"task={task!r} is not allowed: expected 'regression' or 'classification'.")
    if not 0.0 <= float(test_fraction) < 1.0:
        raise InputError(f"test_fraction={test_fraction!r} is not allowed: expected a number in [0, 1).")
    if not np.all(np.isfinite(x)):
        raise InputError("x is not allowed: it contains NaN or infinite values.")
    if standardize:
        sd = x.std(0)
        x = (x - x.mean(0)) / np.where(sd > 0, sd, 1.0)
    if task == "regression":
        y = y.astype(np.float64)
        if not np.all(np.isfinite(y)):
            raise InputError("y is not allowed: it contains NaN or infinite values.")
        if scale_target:
            m = np.abs(y).max()
            y = y / (m if m > 0 else 1.0)
    perm = np.random.default_rng(seed).permutation(len(x))
    n_test = int(round(len(x) * float(test_fraction)))
    test, train = perm[:n_test], perm[n_test:]
    ty = dtype if task == "regression" else torch.long
    t = lambda a, d: torch.as_tensor(np.ascontiguousarray(a), dtype=d)  # noqa: E731
    return TabularData(t(x[train], dtype), t(y[train], ty), t(x[test], dtype), t(y[test], ty), task)


def load_csv(path, target: int = -1, *, delimiter: str = ",", skip_header: int = 0, **kwargs) -> TabularData:
    """Read a numeric CSV (column ``target`` is y, the others x) and :func:`prepare` it."""
    try:
        a = np.loadtxt(path, delimiter=delimiter, skiprows=skip_header, ndmin=2)
    except ValueError as exc:
        raise InputError(f"path={path!r} is not allowed: not a numeric table ({exc}).") from None
    t = target % a.shape[1]
    return prepare(np.delete(a, t, axis=1), a[:, t], **kwargs)


def synthetic(name: str = "california", *, n: int | None = None, seed: int = 0, noise: float = 0.1,
              hidden: int = 16):
    """``(x, y)`` numpy arrays shaped like a paper's dataset (:data:`SHAPES`; ``n`` overrides the rows).

    Features: correlated Gaussians with skewed marginals (like housing data); target: a fixed
    random tanh network of the features plus Gaussian noise (regression), or the argmax of its
    logits (classification).  Deterministic given ``seed``.
    """
    if name not in SHAPES:
        raise InputError(f"name={name!r} is not allowed: expected one of {sorted(SHAPES)}.")
    rows, d, task, classes = SHAPES[name]
    rows = rows if n is None else int(n)
    if rows < 2:
        raise InputError(f"n={n!r} is not allowed: expected an integer >= 2.")
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(d, d)) / np.sqrt(d)
    x = rng.normal(size=(rows, d)) @ (np.eye(d) + mix)
    x[:, : d // 2] = np.sign(x[:, : d // 2]) * np.abs(x[:, : d // 2]) ** 1.3   # skewed marginals
    w1 = rng.normal(size=(d, hidden)) / np.sqrt(d)
    h = np.tanh(x @ w1 + 0.1 * rng.normal(size=hidden))
    if task == "regression":
        y = h @ rng.normal(size=hidden) / np.sqrt(hidden) + 0.3 * x[:, 0] + noise * rng.normal(size=rows)
        return x, y + 2.0   # positive targets, like prices
    logits = h @ rng.normal(size=(hidden, classes)) * 2.0 + noise * rng.normal(size=(rows, classes))
    return x, logits.argmax(1)
