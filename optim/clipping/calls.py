"""The calls of the modules that own parameters, as one forward left them: the signals of the layers path.

A :class:`Recorder` hooks every module that owns trained parameters (``register_forward_hook(...,
with_kwargs=True)``).  While it records, each call leaves a :class:`Call`: the module, its positional and keyword
inputs (detached), its floating outputs -- joined to the autograd graph by a zero leaf where they are not in it
(the engine runs the forward with the parameters out of the graph), hooked so that the backward leaves their
gradients -- and the record dimension of its tensors (:mod:`.records` decides it, never from a guess).  Outputs
of any structure -- tensors, tuples, dicts, ``PackedSequence``, Hugging Face's ``ModelOutput`` -- reach the caller
unchanged in type and value (:func:`rebuild`).

A call whose input has size 1 where the records are (a position embedding looked up once for the whole batch,
``position_ids`` of shape ``[1, T]``) is broadcast over the records: its input and output are expanded to the
batch's rows there (views; every use of a broadcast output by broadcasting is unchanged), so that the backward
leaves each record's own output gradient -- the gradient probe of :mod:`.records` checks that it does.
"""

from __future__ import annotations

import copy
import functools

import torch
from torch import nn

from .rules import rule_for

__all__ = ["Call", "Recorder", "leaves", "rebuild", "owners", "first_tensor"]


def leaves(obj) -> list:
    """Every tensor in ``obj`` (a tensor, or tuples, lists, dicts of them, nested), in order.

    Args:
        obj: a tensor or a nested container of them (other values are skipped).

    Returns:
        The list of tensors, depth first.
    """
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in leaves(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in leaves(o)]
    return []


def rebuild(obj, fn):
    """``obj`` with every tensor ``t`` replaced by ``fn(t)``, in the same container types.

    A namedtuple such as ``PackedSequence`` is rebuilt from its fields, a dict subclass such as
    ``ModelOutput`` copied and refilled.

    Args:
        obj: a tensor or a nested container of them (other values are kept as they are).
        fn: ``fn(tensor) -> tensor``.

    Returns:
        The rebuilt object.
    """
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple):
        items = [rebuild(o, fn) for o in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(obj, list):
        return type(obj)(rebuild(o, fn) for o in obj)
    if isinstance(obj, dict):
        if type(obj) is dict:
            return {k: rebuild(v, fn) for k, v in obj.items()}
        new = copy.copy(obj)
        for k, v in obj.items():
            new[k] = rebuild(v, fn)
        return new
    return obj


def first_tensor(args, kwargs):
    """The first tensor (or ``PackedSequence``) among the positional inputs, else among the keyword inputs.

    Args:
        args: the positional inputs.
        kwargs: the keyword inputs.

    Returns:
        That tensor or ``PackedSequence``, or None when there is none.
    """
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, nn.utils.rnn.PackedSequence) or isinstance(a, torch.Tensor):
            return a
    return None


def _floating(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point()


class Call:
    """One call of a module that owns parameters.

    Args:
        name: the module's name in the model (``""``: the root).
        module: the module called.
        args: its positional inputs (detached).
        kwargs: its keyword inputs (detached).
        out: its output as returned to the caller (floating tensors joined to the graph).
        outs: its floating output tensors (as joined), in order.
        rows: the number of records in the batch.
        autocast: ``(device, dtype)`` of the autocast region it ran in, or None.
        broadcast: its size-1 record dimension was expanded to ``rows``.

    Attributes:
        grads: the backward's gradient of each of ``outs`` (by index; absent: zero).
        dim: the dimension of the first input and output that indexes the records (None: the whole call is
            one record).
        out_dims: the record dimension of each output, or None (``dim`` for every one).
        keys: the module's trained parameters wanted, own name -> the run's name.
        point: the parameter values the call ran at (relative names; None: the module's own).
    """

    __slots__ = ("name", "module", "args", "kwargs", "outs", "out", "grads", "dim", "out_dims", "rows", "keys", "point",
                 "autocast", "broadcast")

    def __init__(self, name, module, args, kwargs, out, outs, rows, autocast=None, broadcast=False):
        self.name, self.module, self.args, self.kwargs = name, module, args, kwargs
        self.out, self.outs, self.grads = out, outs, {}
        self.dim, self.out_dims, self.rows, self.keys, self.point = 0, None, rows, {}, None
        self.autocast, self.broadcast = autocast, broadcast

    def grad(self, j: int) -> torch.Tensor:
        """The gradient of output ``j``.

        Args:
            j: the index of the output in ``outs``.

        Returns:
            The backward's gradient, or zeros shaped as the output when none reached it.
        """
        g = self.grads.get(j)
        return torch.zeros_like(self.outs[j]) if g is None else g

    def input(self):
        """The call's first input.

        Returns:
            The first tensor (or ``PackedSequence``) among its inputs (:func:`first_tensor`), or None.
        """
        return first_tensor(self.args, self.kwargs)

    def _records_first(self, t):
        if self.dim is None:
            return t.unsqueeze(0)
        return t if self.dim == 0 else t.movedim(self.dim, 0)

    def a(self) -> torch.Tensor:
        """The first input, records on dim 0.

        Returns:
            The input moved so that the records are on dim 0 (``dim`` None: a leading dimension of 1 added).
        """
        return self._records_first(self.input())

    def g(self) -> torch.Tensor:
        """The first output's gradient, records on dim 0.

        Returns:
            The gradient (zeros if none reached it) moved so that the records are on dim 0.
        """
        return self._records_first(self.grad(0))

    def signature(self):
        """What identifies the call across forwards.

        Returns:
            ``(name, module class name)``.
        """
        return self.name, type(self.module).__name__


def delegated(m: nn.Module) -> bool:
    """Every parameter ``m`` owns is also a parameter of one of its children, whose calls serve it (Opacus's
    ``DPLSTM`` / ``DPGRU`` / ``DPRNN`` register their cells' ``RNNLinear`` weights again under torch's names).

    Args:
        m: a module.

    Returns:
        True when ``m`` owns parameters and each of them is found among its children's.
    """
    own = [p for _, p in m.named_parameters(recurse=False)]
    below = {id(p) for c in m.children() for p in c.parameters()}
    return bool(own) and all(id(p) in below for p in own)


def owners(model: nn.Module, trained) -> list:
    """``[(name, module)]`` of the modules that own a parameter in ``trained`` (ids), in ``named_modules`` order;
    a module whose parameters its children own too (:func:`delegated`) is left to them.

    Args:
        model: the model.
        trained: the ``id`` s of the trained parameters (a set or any container supporting ``in``).

    Returns:
        One ``(name, module)`` per owning module (a module reached under two names: its first).
    """
    out = []
    for name, m in model.named_modules(remove_duplicate=False):
        if not delegated(m) and any(id(p) in trained for _, p in m.named_parameters(recurse=False)):
            if all(m is not o for _, o in out):
                out.append((name, m))
    return out


class Recorder:
    """Forward hooks on ``modules`` (``[(name, module)]``) that record their calls while recording.

    Recording runs between :meth:`start` and :meth:`stop`.

    Args:
        modules: ``[(name, module)]`` the modules to hook (e.g. from :func:`owners`).
        broadcast_dim: ``f(module)``: the dimension where a size-1 input is broadcast over the records, or
            None; or None (no broadcasting).
    """

    def __init__(self, modules, *, broadcast_dim=None):
        self.calls = None
        self.rows = 0
        self.broadcast_dim = broadcast_dim      # f(module) -> the dim where a size-1 input is broadcast, or None
        # plain closures (not bound methods or partials): copy.deepcopy of the user's model shares them, as it
        # shares every function, instead of copying this recorder and the batch it holds
        self.handles = [m.register_forward_hook(_hook_of(self, name), with_kwargs=True) for name, m in modules]

    def remove(self) -> None:
        """Remove the hooks (the recorder records nothing more)."""
        for h in self.handles:
            h.remove()
        self.handles = []

    def start(self, calls: list, rows: int) -> None:
        """Record the following calls.

        Args:
            calls: the list each call's :class:`Call` is appended to.
            rows: the number of records in the batch.
        """
        self.calls, self.rows = calls, int(rows)

    def stop(self) -> None:
        """Stop recording (the hooks stay)."""
        self.calls = None

    def record(self, name, mod, args, kwargs, out):
        """The hook of every call (nothing unless recording).

        Args:
            name: the module's name.
            mod: the module.
            args: its positional inputs.
            kwargs: its keyword inputs.
            out: its output.

        Returns:
            None when not recording (the output unchanged), else the output rebuilt with its floating tensors
            joined to the graph (same types and values).
        """
        calls = self.calls
        if calls is None:
            return None
        args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
        kwargs = {k: (v.detach() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        broadcast = False
        d = self.broadcast_dim(mod) if self.broadcast_dim is not None else None
        x = first_tensor(args, kwargs)
        if (d is not None and self.rows > 1 and isinstance(x, torch.Tensor) and isinstance(out, torch.Tensor)
                and x.dim() > d and out.dim() > d and x.shape[d] == 1 and out.shape[d] == 1):
            shape = [-1] * x.dim()
            shape[d] = self.rows
            args = tuple(x.expand(*shape) if a is x else a for a in args)
            kwargs = {k: (x.expand(*shape) if v is x else v) for k, v in kwargs.items()}
            oshape = [-1] * out.dim()
            oshape[d] = self.rows
            out = out.expand(*oshape)
            broadcast = True
        outs, memo = [], {}
        ac = _autocast_state()
        # with several outputs each is handed on as a node of its own, so that its hook sees only the gradient of
        # its uses after the call: an output computed from another inside the module (an LSTM cell's h' = o tanh(c')
        # on the CPU) would otherwise receive that inner path too, and the rule's replay would count it twice
        several = len({id(t) for t in leaves(out) if _floating(t)}) > 1

        def join(t):
            if not _floating(t):
                return t
            if id(t) in memo:
                return memo[id(t)]
            z = t if t.requires_grad and not several else t + t.new_zeros((), requires_grad=True)
            outs.append(z)
            memo[id(t)] = z
            return z

        new = rebuild(out, join)
        call = Call(name, mod, args, kwargs, new, outs, self.rows, ac, broadcast)
        rule = rule_for(mod)
        if rule is None or rule.signals == "call":        # a replay needs the parameters the call ran at
            call.point = dict(mod.named_parameters())
        for i, z in enumerate(outs):
            if z.requires_grad:
                z.register_hook(functools.partial(_keep, call.grads, i))
        calls.append(call)
        return new


def _hook_of(rec: "Recorder", name: str):
    def hook(mod, args, kwargs, out):
        return rec.record(name, mod, args, kwargs, out)
    return hook


def _keep(grads: dict, i: int, g):
    grads[i] = g if i not in grads else grads[i] + g


def _autocast_state():
    """``(device, dtype)`` of the autocast region the call ran in, or None."""
    for dev in ("cpu", "cuda"):
        try:
            if torch.is_autocast_enabled(dev):
                return dev, torch.get_autocast_dtype(dev)
        except (RuntimeError, TypeError):        # pragma: no cover  (an older torch: no per-device query)
            continue
    return None
