"""Opacus's DP layers (``opacus.layers``) under their names: :class:`DPLSTM`, :class:`DPGRU`, :class:`DPRNN`,
:class:`DPMultiheadAttention` and :class:`SequenceBias`, with Opacus's constructors and call signatures.

They are names for the layers dpcalib's per-layer rules already serve, not layers of their own:

* :class:`DPLSTM`, :class:`DPGRU` and :class:`DPRNN` are ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN``.  Opacus writes its
  own unrolled cells (``RNNLinear`` layers called once per time step) because its hooks need a Linear layer to
  see each step; dpcalib's rule for recurrent layers (:mod:`dpcalib.optim.clipping.recurrent`) replays the fused
  kernel's call unrolled at the step instead, and measures each record's gradient in float64 by Gram products.
  So the forward runs torch's fused kernel (cuDNN on a GPU), the parameters and the ``state_dict`` are
  torch's (``weight_ih_l0``, ...; Opacus renames its cells' to the same keys), the module loads into a plain
  ``nn.LSTM`` for inference and back, and ``isinstance(m, nn.LSTM)`` holds.  The second argument of the call
  is Opacus's ``state_init`` (torch's ``hx``; either keyword).
* :class:`DPMultiheadAttention` is :class:`~dpcalib.optim.LinearMultiheadAttention` -- query, key, value and
  output projections as four ``nn.Linear`` layers the Linear rule clips, ``add_bias_kv`` by
  :class:`SequenceBias` modules (their one parameter per position is served by the per-module vmap rule),
  ``add_zero_attn`` -- with Opacus's constructor and Opacus's ``state_dict``: ``nn.MultiheadAttention``'s keys
  (``in_proj_weight``, ``in_proj_bias``, ``bias_k``, ...), and ``load_state_dict`` takes those or the Linear
  layers' own.  ``qlinear``, ``klinear`` and ``vlinear`` are Opacus's names of the projections.

What Opacus refuses is refused here, one line each: ``proj_size > 0``.  What the engine refuses in private
training (and Opacus does not): dropout between the layers of a multi-layer recurrent module in training mode
(the fused kernel's masks cannot be replayed; stack one-layer modules with ``nn.Dropout`` between them).
"""

from __future__ import annotations

import torch
from torch import nn

from ..accountant.validation import InputError
from .clipping.attention import LinearMultiheadAttention, SequenceBias

__all__ = ["DPLSTM", "DPGRU", "DPRNN", "DPMultiheadAttention", "SequenceBias"]


class _Recurrent:
    """What DPLSTM, DPGRU and DPRNN add to torch's module (put before it in the bases): Opacus's checks of
    the constructor's options, and the call that takes Opacus's ``state_init`` or torch's ``hx``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None, **mode):
        """Check Opacus's options, then build torch's module.

        Args:
            input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, proj_size, device,
                dtype: as :class:`DPLSTM`, :class:`DPGRU` and :class:`DPRNN` document them.
            **mode: ``nonlinearity`` (``"tanh"`` or ``"relu"``) for an RNN; nothing else.

        Raises:
            InputError: if ``dropout`` is not in [0, 1], ``proj_size`` is not 0 or ``nonlinearity`` is neither
                ``"tanh"`` nor ``"relu"``.
        """
        torch_cls = next(c for c in type(self).__mro__ if c in (nn.LSTM, nn.GRU, nn.RNN))
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
            raise InputError(f"dropout={dropout!r} is not allowed: expected a probability in [0, 1].")
        if proj_size != 0:
            raise InputError(f"proj_size={proj_size!r} is not allowed: expected 0 (DP{torch_cls.__name__} has no "
                             "projections, as Opacus's has none).")
        if mode.get("nonlinearity", "tanh") not in ("tanh", "relu"):
            raise InputError(f"nonlinearity={mode['nonlinearity']!r} is not allowed: expected 'tanh' or 'relu'.")
        super().__init__(input_size, hidden_size, num_layers=num_layers, bias=bias, batch_first=batch_first,
                         dropout=float(dropout), bidirectional=bidirectional, device=device, dtype=dtype, **mode)

    def forward(self, input, state_init=None, hx=None):
        """Run the sequences, as torch's module's ``forward``.

        Args:
            input: ``[T, B, input_size]`` (``[B, T, input_size]`` when ``batch_first``), ``[T, input_size]``, or a
                ``PackedSequence``.
            state_init: the initial state, each part ``[num_layers * directions, B, hidden_size]``: ``(h_0, c_0)``
                for an LSTM, ``h_0`` for a GRU or an RNN; or None (zeros).
            hx: torch's name of ``state_init`` (give one of them).

        Returns:
            As torch's module: ``(output, (h_n, c_n))`` for an LSTM, ``(output, h_n)`` for a GRU or an RNN.

        Raises:
            InputError: if both ``state_init`` and ``hx`` are given.
        """
        if state_init is not None and hx is not None:
            raise InputError("state_init and hx are not allowed together: they are the same initial state (give one).")
        return super().forward(input, state_init if state_init is not None else hx)


class DPLSTM(_Recurrent, nn.LSTM):
    """Opacus's ``DPLSTM``: an ``nn.LSTM`` (fused forward, torch's parameters) that dpcalib's recurrent rule clips.

    Args:
        input_size: the features of each input step.
        hidden_size: the features of the hidden state.
        num_layers: the stacked layers.
        bias: whether the layers have biases.
        batch_first: inputs and outputs are ``[B, T, F]`` (else ``[T, B, F]``).
        dropout: dropout on each layer's output but the last, a probability in [0, 1].
        bidirectional: run each layer in both directions.
        proj_size: 0 (Opacus's signature; projections are refused).
        device: the parameters' device (None: the default).
        dtype: the parameters' dtype (None: the default).

    Raises:
        InputError: if ``dropout`` is not in [0, 1] or ``proj_size`` is not 0.
    """


class DPGRU(_Recurrent, nn.GRU):
    """Opacus's ``DPGRU``: an ``nn.GRU`` (fused forward, torch's parameters) that dpcalib's recurrent rule clips.

    Args:
        input_size: the features of each input step.
        hidden_size: the features of the hidden state.
        num_layers: the stacked layers.
        bias: whether the layers have biases.
        batch_first: inputs and outputs are ``[B, T, F]`` (else ``[T, B, F]``).
        dropout: dropout on each layer's output but the last, a probability in [0, 1].
        bidirectional: run each layer in both directions.
        proj_size: 0 (Opacus's signature; a GRU has no projections).
        device: the parameters' device (None: the default).
        dtype: the parameters' dtype (None: the default).

    Raises:
        InputError: if ``dropout`` is not in [0, 1] or ``proj_size`` is not 0.
    """


class DPRNN(_Recurrent, nn.RNN):
    """Opacus's ``DPRNN``: an ``nn.RNN`` (fused forward, torch's parameters) that dpcalib's recurrent rule clips.

    Args:
        input_size: the features of each input step.
        hidden_size: the features of the hidden state.
        num_layers: the stacked layers.
        bias: whether the layers have biases.
        batch_first: inputs and outputs are ``[B, T, F]`` (else ``[T, B, F]``).
        dropout: dropout on each layer's output but the last, a probability in [0, 1].
        bidirectional: run each layer in both directions.
        proj_size: 0 (Opacus's signature; an RNN has no projections).
        nonlinearity: ``"tanh"`` or ``"relu"``.
        device: the parameters' device (None: the default).
        dtype: the parameters' dtype (None: the default).

    Raises:
        InputError: if ``dropout`` is not in [0, 1], ``proj_size`` is not 0 or ``nonlinearity`` is neither
            ``"tanh"`` nor ``"relu"``.
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0, bidirectional: bool = False, proj_size: int = 0,
                 nonlinearity: str = "tanh", device=None, dtype=None):
        # Opacus's positional order: nonlinearity after proj_size
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, proj_size,
                         device, dtype, nonlinearity=nonlinearity)


class DPMultiheadAttention(LinearMultiheadAttention):
    """Opacus's ``DPMultiheadAttention``: :class:`~dpcalib.optim.LinearMultiheadAttention` with Opacus's
    constructor and ``nn.MultiheadAttention``'s ``state_dict`` keys.

    Args:
        embed_dim: the model dimension E, a multiple of ``num_heads``.
        num_heads: the number of heads.
        dropout: the dropout probability on the attention weights (training mode only).
        bias: whether the four projections have biases.
        add_bias_kv: append a learned key and value position.
        add_zero_attn: append a zero key and value position.
        kdim: the keys' dimension (None: ``embed_dim``).
        vdim: the values' dimension (None: ``embed_dim``).
        batch_first: inputs and outputs are ``[B, L, E]`` (else ``[L, B, E]``).
        device: the parameters' device (None: the default).
        dtype: the parameters' dtype (None: the default).

    Raises:
        InputError: if ``embed_dim`` is not a multiple of ``num_heads``.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, device=None, dtype=None):
        super().__init__(embed_dim, num_heads, dropout=dropout, bias=bias, kdim=kdim, vdim=vdim,
                         batch_first=batch_first, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn)
        if device is not None or dtype is not None:
            self.to(device=device, dtype=dtype)
        # torch >= 2.5 names the state_dict post-hook's registration; earlier versions have the same hook unnamed
        post = getattr(self, "register_state_dict_post_hook", None) or getattr(self, "_register_state_dict_hook")
        post(_to_torch_keys)
        self.register_load_state_dict_pre_hook(_from_torch_keys)

    @property
    def qlinear(self) -> nn.Linear:
        """Opacus's name of the query projection.

        Returns:
            ``q_proj``.
        """
        return self.q_proj

    @property
    def klinear(self) -> nn.Linear:
        """Opacus's name of the key projection.

        Returns:
            ``k_proj``.
        """
        return self.k_proj

    @property
    def vlinear(self) -> nn.Linear:
        """Opacus's name of the value projection.

        Returns:
            ``v_proj``.
        """
        return self.v_proj


_PROJ = ("q", "k", "v")


def _to_torch_keys(module, state, prefix, local_metadata):
    """``state_dict`` post-hook: the Linear layers' keys rewritten as ``nn.MultiheadAttention``'s (in place)."""
    w = [state.pop(f"{prefix}{p}_proj.weight") for p in _PROJ]
    if module.kdim == module.embed_dim and module.vdim == module.embed_dim:
        state[prefix + "in_proj_weight"] = torch.cat(w, 0)
    else:
        for p, t in zip(_PROJ, w):
            state[f"{prefix}{p}_proj_weight"] = t
    if f"{prefix}q_proj.bias" in state:
        state[prefix + "in_proj_bias"] = torch.cat([state.pop(f"{prefix}{p}_proj.bias") for p in _PROJ], 0)
    for kv in ("k", "v"):
        if f"{prefix}seq_bias_{kv}.bias" in state:
            state[f"{prefix}bias_{kv}"] = state.pop(f"{prefix}seq_bias_{kv}.bias").reshape(1, 1, -1)


def _from_torch_keys(module, state, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    """``load_state_dict`` pre-hook: ``nn.MultiheadAttention``'s keys rewritten as the Linear layers' (in place)."""
    if prefix + "in_proj_weight" in state:
        for p, t in zip(_PROJ, state.pop(prefix + "in_proj_weight").chunk(3, 0)):
            state[f"{prefix}{p}_proj.weight"] = t
    for p in _PROJ:
        if f"{prefix}{p}_proj_weight" in state:
            state[f"{prefix}{p}_proj.weight"] = state.pop(f"{prefix}{p}_proj_weight")
    if prefix + "in_proj_bias" in state:
        for p, t in zip(_PROJ, state.pop(prefix + "in_proj_bias").chunk(3, 0)):
            state[f"{prefix}{p}_proj.bias"] = t
    for kv in ("k", "v"):
        if f"{prefix}bias_{kv}" in state:
            state[f"{prefix}seq_bias_{kv}.bias"] = state.pop(f"{prefix}bias_{kv}").reshape(-1)
