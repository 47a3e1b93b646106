"""Ceilings on the work of the commands that train (audit, probe, train), each refusal with its
reason: the optimizers hold every record in memory and run it through the model at every step, so
a run's size is refused before any of it starts, never discovered hours or gigabytes later."""

from __future__ import annotations

from .algorithms import SPECS
from ..accountant.validation import InputError

#: ceilings on the work of the commands that run the optimizers, with the reason in each refusal
MAX_SEED = 2 ** 32 - 1
MAX_RUNS = 10 ** 6          # each run's output is kept for the statistics (and 1e6 runs take hours)
MAX_CANARIES = 10 ** 6      # each canary is a record and a score


#: the commands that train (audit, probe): the most steps of one run, the most records, and the most
#: model steps over all runs of an audit (at >= 0.1 ms a step, 1e8 steps are hours)
MAX_TRAINING_STEPS = 10 ** 6
MAX_TRAINING_RECORDS = 10 ** 6
MAX_AUDIT_STEPS = 10 ** 8


def _run_length(mech) -> int:
    """The steps (releases) one run of the mechanism makes: ``total_steps`` where the mechanism
    says it, else the product of its run-length fields (rounds x local steps for DIFF2-BVR)."""
    total = getattr(mech, "total_steps", None)
    if isinstance(total, int):
        return total
    n = 1
    for f in ("rounds", "steps", "iterations", "local_steps"):
        v = getattr(mech, f, None)
        if isinstance(v, int):
            n *= v
    return n


def _dataset_records(mech, args) -> int:
    """The records the run's datasets hold (all clients or nodes together)."""
    import dataclasses

    shape = {f.name: getattr(mech, f.name) for f in dataclasses.fields(mech)}
    if "n_min" in shape:
        return shape["n_min"] * shape.get("clients", 1)
    for f in ("N", "n", "samples_per_node"):
        if shape.get(f) is not None:
            return shape[f] * (4 if f == "samples_per_node" else 1)
    return getattr(args, "n", None) or 0


def training_limits(algorithm: str, mech, args, runs: int = 1, records: int | None = None) -> None:
    """Refuse a run whose size would take hours or all the memory, before any of it starts: the
    optimizers hold every record in memory and run it through the model at every step.

    Args:
        algorithm: a registered algorithm name.
        mech: the mechanism of the run.
        args: the parsed command line (``command_name`` and the shape options).
        runs: how many runs (an audit's), >= 1.
        records: the records of the run's datasets (None: derived from the mechanism).

    Raises:
        InputError: if the run has more steps than ``MAX_TRAINING_STEPS``, the runs together more
            than ``MAX_AUDIT_STEPS``, or the datasets more records than ``MAX_TRAINING_RECORDS``.
    """
    steps = _run_length(mech)
    field = SPECS[algorithm].rounds_field or "steps"
    flag = "--" + (field if getattr(args, field, None) is not None else "epochs").replace("_", "-")
    if steps > MAX_TRAINING_STEPS:
        raise InputError(f"{flag}={getattr(args, flag[2:].replace('-', '_'), steps)} is not allowed for "
                          f"{args.command_name}: a run of {steps} steps is over the {MAX_TRAINING_STEPS:.0e} this "
                          "command trains (each step runs the model on the batch; longer runs take hours)")
    if runs * steps > MAX_AUDIT_STEPS:
        raise InputError(f"--runs={runs} is not allowed with {steps} steps a run: {2 * runs * steps:.3g} model steps in "
                          f"all (both datasets) is over the {2 * MAX_AUDIT_STEPS:.0e} an audit runs (hours here); "
                          "expected fewer runs or a shorter run")
    records = _dataset_records(mech, args) if records is None else records
    if records > MAX_TRAINING_RECORDS:
        raise InputError(f"the datasets of this run hold {records} records, over the {MAX_TRAINING_RECORDS:.0e} that "
                          f"{args.command_name} trains on (every record is kept in memory and runs through the "
                          "model at every step): expected smaller shape options (--n, --n-min, --clients, "
                          "--samples-per-node)")


def check_int(value: int, flag: str, low: int, high: int, why: str = "") -> int:
    """An integer option in ``[low, high]``.

    Args:
        value: the option's value.
        flag: the option's name, for the refusal.
        low: the smallest allowed value.
        high: the largest allowed value.
        why: why the range, in words (optional).

    Returns:
        ``value``.

    Raises:
        InputError: if ``value`` is outside ``[low, high]``.
    """
    if not low <= value <= high:
        raise InputError(f"{flag}={value} is not allowed: expected an integer in [{low}, {high}]"
                          + (f" ({why})" if why else ""))
    return value


def check_real(value: float, flag: str, low: float = 0.0, high: float = float("inf")) -> float:
    """A finite number in ``(low, high]`` (a learning rate, a clip norm).

    Args:
        value: the option's value.
        flag: the option's name, for the refusal.
        low: the excluded lower end.
        high: the included upper end.

    Returns:
        ``value``.

    Raises:
        InputError: if ``value`` is not finite or not in ``(low, high]``.
    """
    import math

    if not (math.isfinite(value) and low < value <= high):
        raise InputError(f"{flag}={value!r} is not allowed: expected a finite number in ({low:g}, {high:g}]")
    return value


def seed_help(command: str, what: str) -> str:
    """The help of ``--seed`` for ``audit`` and ``probe``: what it seeds, its range, and why one
    would give it.

    Args:
        command: ``"audit"`` or ``"probe"``.
        what: what the seed draws, in words.

    Returns:
        The help text.
    """
    return (f"seed of {what}, an integer in [0, {MAX_SEED}].  Default: a fresh seed from the operating system's "
            f"entropy, printed on the 'seed' line, so that every {command} differs and any one can be repeated.  Give "
            f"the printed seed to repeat that {command} exactly (a bug report, a recorded result); it is no secret: "
            f"the {command} plays the adversary, who knows it")


def choose_seed(args) -> int:
    """``--seed`` checked, or (not given) a fresh one drawn from the operating system's entropy;
    ``args.seed_drawn`` says which.  32 bits: any seed drawn is one ``--seed`` takes back.

    Args:
        args: the parsed command line (``seed``: an integer or None).

    Returns:
        The seed, also set as ``args.seed``.

    Raises:
        InputError: if the given seed is outside ``[0, MAX_SEED]``.
    """
    import secrets

    args.seed_drawn = args.seed is None
    if args.seed_drawn:
        args.seed = secrets.randbits(32)
    return check_int(args.seed, "--seed", 0, MAX_SEED, "a seed of numpy's and torch's generators")


def seed_line(args, command: str) -> str:
    """The ``seed`` line of an audit's or a probe's output: the seed, how it was chosen, and how to
    repeat the run.

    Args:
        args: the parsed command line, after :func:`choose_seed`.
        command: ``"audit"`` or ``"probe"``.

    Returns:
        The line.
    """
    how = "drawn from the operating system's entropy; " if getattr(args, "seed_drawn", False) else ""
    return f"seed        {args.seed} ({how}--seed {args.seed} repeats this {command})"
