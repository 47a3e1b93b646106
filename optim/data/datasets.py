"""Data for the reference optimizers: the papers' preprocessing and synthetic data of their shapes.

Preprocessing (DIFF2 Sec. 6 / App. A): standardise every feature to mean 0, std 1;
regression targets divided by max ``|y|`` over the whole dataset; random 80 % / 20 % train/test split;
the training set cut into P equal i.i.d. shards (sizes differ by at most one record).

Tables with text (categorical) columns are coded by :func:`encode_table` (ordinal or one-hot).
Nothing is downloaded: :func:`load_csv` reads a local file, :func:`synthetic` draws data with the
shape of a paper's dataset (:data:`SHAPES`) from a random "teacher" network.

No default seed is a constant: without ``seed=`` the split of :func:`prepare` and the data of
:func:`synthetic` come from fresh operating-system entropy
(:func:`~dpcalib.optim.randomness.choose_seed`), so two calls differ; pass ``seed=`` wherever the
same data must come back (tests, docs, the ranks of one run, a resumed run).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from ...accountant.validation import InputError
from ..randomness import choose_seed

__all__ = ["SHAPES"]

#: name -> (rows, features, task, classes): the datasets of the papers (DIFF2 Sec. 6, DP-SRM and AdaD2P experiments).
SHAPES = {
    "california": (20640, 8, "regression", None),
    "gas_turbine": (36733, 9, "regression", None),
    "blogfeedback": (60021, 280, "regression", None),
    "covtype": (581012, 54, "classification", 7),
    "ijcnn1": (49990, 22, "classification", 2),
}


def equal_shards(x, y, parts: int) -> list:
    """Cut ``(x, y)`` into ``parts`` consecutive shards whose sizes differ by at most one.

    Args:
        x: the features, indexable by row slices (length n).
        y: the targets, same length.
        parts: number of shards, an integer in [1, n].

    Returns:
        A list of ``parts`` pairs ``(x_shard, y_shard)``.

    Raises:
        InputError: if ``parts`` is not an integer >= 1 or exceeds the number of records.
    """
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise InputError(f"parts={parts!r} is not allowed: expected an integer >= 1.")
    n = len(x)
    if parts > n:
        raise InputError(f"parts={parts} is not allowed: expected at most the {n} records.")
    bounds = [(i * n) // parts for i in range(parts + 1)]
    return [(x[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


@dataclass
class TabularData:
    """A prepared dataset: torch tensors, train rows already in random order.

    Attributes:
        x_train: training features, shape (n_train, d).
        y_train: training targets (float for regression, long class codes for classification).
        x_test: test features, shape (n_test, d).
        y_test: test targets.
        task: ``"regression"`` or ``"classification"``.
        columns: the feature names.
        classes: classification: what label 0, 1, ... stands for; None for regression.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    task: str
    columns: tuple = ()       #: the feature names (text columns coded as :func:`encode_table` says)
    classes: tuple | None = None   #: classification: what label 0, 1, ... stands for

    def shards(self, clients: int) -> list:
        """Equal i.i.d. shards of the training set, one per client (DIFF2: P = 10).

        Args:
            clients: number of clients P, an integer in [1, n_train].

        Returns:
            A list of ``(x, y)`` shards (:func:`equal_shards`).

        Raises:
            InputError: if ``clients`` is not an integer in [1, n_train].
        """
        return equal_shards(self.x_train, self.y_train, clients)

    def n_min(self, clients: int) -> int:
        """Smallest shard: the n_min the calibration needs.

        Args:
            clients: number of clients P, >= 1.

        Returns:
            ``n_train // clients``.
        """
        return len(self.x_train) // clients

    @property
    def train(self):
        """``(x_train, y_train)``."""
        return self.x_train, self.y_train

    @property
    def test(self):
        """``(x_test, y_test)``."""
        return self.x_test, self.y_test


def _columns(x):
    """``(names, list of 1-d object/number arrays)`` of a table: a pandas DataFrame, a dict of
    columns, or an (n, d) array-like (names ``"0"``, ``"1"``, ...)."""
    if hasattr(x, "columns") and hasattr(x, "__getitem__") and not isinstance(x, np.ndarray):   # a DataFrame
        names, cols = [str(c) for c in x.columns], [np.asarray(x[c]) for c in x.columns]
    elif isinstance(x, dict):
        names, cols = [str(c) for c in x], [_column(v) for v in x.values()]
    else:
        names = cols = None
    if names is not None:
        bad = [n for n, c in zip(names, cols) if c.ndim != 1]
        if bad:
            raise InputError(f"x is not allowed: column {bad[0]!r} is not one-dimensional.")
        lengths = sorted({len(c) for c in cols})
        if len(lengths) > 1:
            raise InputError(f"x is not allowed: its columns have different lengths {lengths}.")
        return names, cols
    a = np.asarray(x)
    if a.ndim != 2:
        raise InputError(f"x is not allowed: expected a table of shape (n, d), got shape {a.shape}.")
    return [str(j) for j in range(a.shape[1])], [a[:, j] for j in range(a.shape[1])]


def _column(values) -> np.ndarray:
    """One column as an array; a list mixing text and numbers (or None / NaN) stays an object array, so
    that a missing value is not turned into the text 'nan' / 'None'."""
    a = np.asarray(values)
    if a.dtype.kind in "US" and a.ndim == 1:
        return np.array(list(values), dtype=object)
    return a


def _missing(col: np.ndarray) -> bool:
    """Does a column hold a missing value (None, or NaN in a text column)?"""
    if col.dtype.kind != "O":
        return False
    return any(v is None or (isinstance(v, float) and v != v) for v in col)


def _is_numeric(col: np.ndarray) -> bool:
    if col.dtype.kind in "biuf":
        return True
    if col.dtype.kind in "OUS":
        try:
            col.astype(np.float64)
            return True
        except (TypeError, ValueError):
            return False
    return False


def _order(name: str, col: np.ndarray, categories: dict) -> list:
    """The values of a categorical column in the order they are coded: ``categories[name]`` when
    given (every value present must be listed), else sorted."""
    present = sorted({str(v) for v in col})
    if name not in categories:
        return present
    order = [str(v) for v in categories[name]]
    missing = sorted(set(present) - set(order))
    if missing:
        raise InputError(f"categories[{name!r}] is not allowed: it does not list the values {missing[:5]} "
                         f"of column {name!r}.")
    return order


def encode_table(x, *, categorical: str = "ordinal", categories: dict | None = None) -> tuple[np.ndarray, list, list]:
    """``(numeric (n, d') float64 array, column names, which columns are one-hot)`` of a table whose
    columns may hold text.

    A column that is not numeric is *categorical*: ``categorical="ordinal"`` codes it 0, 1, 2, ... in
    the order ``categories[name]`` gives (e.g. ``{"cut": ["Fair", "Good", "Very Good", "Premium",
    "Ideal"]}``), or in sorted order when the column is not named there; ``"onehot"`` replaces it by
    one 0/1 column per value (``"name=value"``); ``"refuse"`` raises, naming the column.

    Args:
        x: the table: an (n, d) array-like, a pandas DataFrame or a dict of columns.
        categorical: ``"ordinal"``, ``"onehot"`` or ``"refuse"``.
        categories: None, or column name -> its values in coding order (a column named here is
            coded as categorical even if numeric).

    Returns:
        ``(array, names, onehot)``: the (n, d') float64 array, the column names and, for each,
        whether it is a one-hot column.

    Raises:
        InputError: if ``categorical`` or ``categories`` is not allowed, the table is not
            (n, d) or its columns differ in length, a column is complex or has missing values, a
            text column is met with ``"refuse"``, or ``categories`` omits a value or names an
            unknown column.
    """
    if categorical not in ("ordinal", "onehot", "refuse"):
        raise InputError(f"categorical={categorical!r} is not allowed: expected 'ordinal', 'onehot' or 'refuse'.")
    if categories is not None and not isinstance(categories, dict):
        raise InputError(f"categories={categories!r} is not allowed: expected a dict column name -> list of its values "
                         "in order.")
    categories = {} if categories is None else {str(k): v for k, v in categories.items()}
    bad = [k for k, v in categories.items() if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__")]
    if bad:
        raise InputError(f"categories[{bad[0]!r}]={categories[bad[0]]!r} is not allowed: expected a list of the "
                         "column's values in order.")
    names, cols = _columns(x)
    unknown = sorted(set(categories) - set(names))
    if unknown:
        raise InputError(f"categories is not allowed: it names columns {unknown} that the table does not have.")
    out, out_names, onehot = [], [], []
    for name, col in zip(names, cols):
        if col.dtype.kind == "c":
            raise InputError(f"x is not allowed: column {name!r} holds complex numbers.")
        if _missing(col):
            raise InputError(f"x is not allowed: column {name!r} has missing values (None or NaN); fill or drop "
                             "them first.")
        if _is_numeric(col) and name not in categories:
            out.append(col.astype(np.float64))
            out_names.append(name)
            onehot.append(False)
            continue
        if categorical == "refuse":
            raise InputError(f"x is not allowed: column {name!r} is not numeric (e.g. {col[0]!r}); pass "
                             "categorical='ordinal' or 'onehot' to code it.")
        order = _order(name, col, categories)
        code = {v: i for i, v in enumerate(order)}
        idx = np.array([code[str(v)] for v in col], dtype=np.int64)
        if categorical == "ordinal":
            out.append(idx.astype(np.float64))
            out_names.append(name)
            onehot.append(False)
        else:
            for i, value in enumerate(order):
                out.append((idx == i).astype(np.float64))
                out_names.append(f"{name}={value}")
                onehot.append(True)
    n = len(cols[0]) if cols else 0
    return (np.stack(out, axis=1) if out else np.zeros((n, 0))), out_names, onehot


def _labels(y) -> tuple[np.ndarray, tuple]:
    """Class labels 0..k-1 and the classes they stand for (sorted)."""
    a = np.asarray(y)
    if _missing(a) or (a.dtype.kind == "f" and not np.all(np.isfinite(a))):
        raise InputError("y is not allowed: it has missing or non-finite labels (None, NaN, inf).")
    classes, codes = np.unique(np.asarray(y).astype(str) if np.asarray(y).dtype.kind in "OUS" else np.asarray(y),
                               return_inverse=True)
    return codes.astype(np.int64), tuple(c.item() if hasattr(c, "item") else c for c in classes)


def prepare(x, y, *, task: str = "regression", test_fraction: float = 0.2, seed: int | None = None,
            standardize: bool = True, scale_target: bool = True, dtype=torch.float32,
            categorical: str = "ordinal", categories: dict | None = None) -> TabularData:
    """The papers' preprocessing of a table ``x`` (n x d: an array, a pandas DataFrame or a dict of
    columns) and targets ``y`` (n,): text columns coded (:func:`encode_table`: ``categorical``,
    ``categories``), every numeric and ordinal column standardised to mean 0, std 1 (one-hot
    columns stay 0/1), regression targets divided by max ``|y|``, classification targets coded
    0..k-1 (``TabularData.classes``: what each code stands for), a random train/test split.

    Args:
        x: the table (n x d): an array, a pandas DataFrame or a dict of columns.
        y: the targets, shape (n,).
        task: ``"regression"`` or ``"classification"``.
        test_fraction: the test share, in [0, 1).
        seed: seed of the split's permutation, an integer >= 0; None (the default): a fresh seed from
            the operating system's entropy, so the split differs from call to call.
        standardize: standardise the numeric and ordinal columns.
        scale_target: regression: divide y by max abs(y).
        dtype: the features' torch dtype (and the regression targets').
        categorical: how text columns are coded (:func:`encode_table`).
        categories: the coding order of categorical columns (:func:`encode_table`).

    Returns:
        A :class:`TabularData`.

    Raises:
        InputError: if the task is unknown, the shapes do not match or n < 2, ``test_fraction``
            is not in [0, 1), x or a regression y is not finite or y is not numeric for
            regression, labels are missing, ``seed`` is neither None nor an integer >= 0, or
            :func:`encode_table` refuses the table.
    """
    if task not in ("regression", "classification"):
        raise InputError(f"task={task!r} is not allowed: expected 'regression' or 'classification'.")
    x, names, onehot = encode_table(x, categorical=categorical, categories=categories)
    y = np.asarray(y)
    if x.ndim != 2 or y.ndim != 1 or len(x) != len(y) or len(x) < 2:
        raise InputError(f"x, y are not allowed: expected x of shape (n, d) and y of shape (n,) with n >= 2, "
                         f"got {x.shape} and {y.shape}.")
    if not 0.0 <= float(test_fraction) < 1.0:
        raise InputError(f"test_fraction={test_fraction!r} is not allowed: expected a number in [0, 1).")
    if not np.all(np.isfinite(x)):
        raise InputError("x is not allowed: it contains NaN or infinite values.")
    if standardize:
        keep = np.array(onehot, dtype=bool)
        with np.errstate(over="ignore", invalid="ignore"):
            sd = x.std(0)
        if not np.all(np.isfinite(sd)):        # a column near 1e300 has no finite variance: divide first
            scale = np.abs(x).max(0)
            xs = x / np.where(scale > 0, scale, 1.0)
            sd, mean = xs.std(0), xs.mean(0)
            z = (xs - mean) / np.where(sd > 0, sd, 1.0)
        else:
            z = (x - x.mean(0)) / np.where(sd > 0, sd, 1.0)
        x = np.where(keep[None, :], x, z)
    classes = None
    if task == "regression":
        try:
            y = y.astype(np.float64)
        except (TypeError, ValueError):
            raise InputError("y is not allowed for task='regression': it is not numeric.") from None
        if not np.all(np.isfinite(y)):
            raise InputError("y is not allowed: it contains NaN or infinite values.")
        if scale_target:
            m = np.abs(y).max()
            y = y / (m if m > 0 else 1.0)
    else:
        y, classes = _labels(y)
    perm = np.random.default_rng(choose_seed(seed)).permutation(len(x))
    n_test = int(round(len(x) * float(test_fraction)))
    test, train = perm[:n_test], perm[n_test:]
    ty = dtype if task == "regression" else torch.long
    t = lambda a, d: torch.as_tensor(np.ascontiguousarray(a), dtype=d)  # noqa: E731
    return TabularData(t(x[train], dtype), t(y[train], ty), t(x[test], dtype), t(y[test], ty), task,
                       tuple(names), classes)


def load_csv(path, target: int = -1, *, delimiter: str = ",", skip_header: int = 0, **kwargs) -> TabularData:
    """Read a numeric CSV (column ``target`` is y, the others x) and :func:`prepare` it.

    Args:
        path: the CSV file.
        target: the index of the target column (negative: from the end).
        delimiter: the field separator.
        skip_header: rows to skip at the top.
        **kwargs: passed to :func:`prepare`.

    Returns:
        A :class:`TabularData`.

    Raises:
        InputError: if the file is not a numeric table, or :func:`prepare` refuses it.
    """
    try:
        a = np.loadtxt(path, delimiter=delimiter, skiprows=skip_header, ndmin=2)
    except ValueError as exc:
        raise InputError(f"path={path!r} is not allowed: not a numeric table ({exc}).") from None
    t = target % a.shape[1]
    return prepare(np.delete(a, t, axis=1), a[:, t], **kwargs)


def synthetic(name: str = "california", *, n: int | None = None, seed: int | None = None, noise: float = 0.1,
              hidden: int = 16):
    """``(x, y)`` numpy arrays shaped like a paper's dataset (:data:`SHAPES`; ``n`` overrides the rows).

    Features: correlated Gaussians with skewed marginals (like housing data); target: a fixed
    random tanh network of the features plus Gaussian noise (regression), or the argmax of its
    logits (classification), all drawn from ``seed``: the same seed gives the same data, no seed
    (the default) fresh data each call.

    Args:
        name: a key of :data:`SHAPES`.
        n: rows, >= 2 (None: the dataset's).
        seed: the random seed, an integer >= 0; None (the default): a fresh seed from the operating
            system's entropy.
        noise: std of the Gaussian noise on the target (or the logits).
        hidden: width of the teacher network.

    Returns:
        ``(x, y)``: float features (rows, d) and targets (floats, or class indices).

    Raises:
        InputError: if ``name`` is unknown, ``n`` < 2 or ``seed`` is neither None nor an integer >= 0.
    """
    if name not in SHAPES:
        raise InputError(f"name={name!r} is not allowed: expected one of {sorted(SHAPES)}.")
    rows, d, task, classes = SHAPES[name]
    rows = rows if n is None else int(n)
    if rows < 2:
        raise InputError(f"n={n!r} is not allowed: expected an integer >= 2.")
    rng = np.random.default_rng(choose_seed(seed))
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
