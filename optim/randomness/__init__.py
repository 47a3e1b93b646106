"""The randomness of a private run: where its secret streams come from (fresh operating-system
entropy by default, a seed for reproducible tests, or a cryptographically secure generator in
``secure_mode``) and every draw made from them -- batch membership, permutations, the returned
iterate's choice and the noise (:mod:`.streams`, :mod:`.secure`).  A draw takes either a
``torch.Generator`` or a :class:`~.secure.SecureGenerator`, so the code that samples or adds noise
never branches on the mode.

May import: the accountant layer's validation (numpy, torch, cryptography and mpmath otherwise)."""

from .secure import SecureGenerator, gaussian_release
from .streams import (RunStreams, bins, check_seed, choose_seed, fresh_root, is_secure, node_seeds, note_restored,
                      permutation, poisson_mask, randint, same_on_ranks, standard_normal, stream_seeds, uniform)

__all__ = ["SecureGenerator", "gaussian_release", "RunStreams", "bins", "check_seed", "choose_seed", "is_secure",
           "node_seeds", "note_restored", "permutation", "poisson_mask", "same_on_ranks", "randint", "standard_normal",
           "stream_seeds", "uniform"]
