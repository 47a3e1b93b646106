"""The data layer: the datasets (in-memory tables, the papers' shapes and preprocessing, CSV
files, shards; :mod:`.datasets`) and how batches are drawn from them (:mod:`.sampling`:
Poisson, fixed-size without replacement, shuffled epochs, balls-in-bins epochs, full batches; the probe's forced
record).

May import: :mod:`dpcalib.accountant` (its input checks), :mod:`dpcalib.optim.randomness` (the draws) and
torch; nothing else of dpcalib.
"""

from .datasets import SHAPES, TabularData, encode_table, equal_shards, load_csv, prepare, synthetic
from .sampling import ForcedRecord, Sampler, bin_batches

__all__ = ["SHAPES", "prepare", "load_csv", "synthetic"]
