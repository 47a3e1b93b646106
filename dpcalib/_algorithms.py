"""Per-algorithm command-line options (the papers' names), kept apart from the parser code."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Opt:
    flag: str            # --rounds
    field: str           # constructor / calibrate keyword
    type: type
    help: str
    default: object = None  # None: required
    target: str = "shape"   # "shape" (constructor), "split" (calibrate keyword)


@dataclass(frozen=True)
class Spec:
    options: tuple         # shape and split options
    noise: tuple           # names of the noise levels, in the order epsilon() takes them
    rounds_field: str | None  # the count that grows with training (for --curve)
    example: str


SPECS = {
    "dp-gd": Spec((Opt("--rounds", "rounds", int, "rounds R"), Opt("--clients", "clients", int, "clients P"),
                   Opt("--n-min", "n_min", int, "smallest local dataset n_min")),
                  ("sigma1",), "rounds",
                  "dpcalib calibrate dp-gd --epsilon 3 --delta 1e-5 --rounds 2000 --clients 10 --n-min 1651"),
    "diff2-gd": Spec((Opt("--rounds", "rounds", int, "rounds R"),
                      Opt("--restart-interval", "restart_interval", int, "restart interval T"),
                      Opt("--clients", "clients", int, "clients P"),
                      Opt("--n-min", "n_min", int, "smallest local dataset n_min"),
                      Opt("--u", "u", float, "budget split u > 1 (Prop. 4.1)", 1.25, "split")),
                     ("sigma1", "sigma2"), "rounds",
                     "dpcalib calibrate diff2-gd --epsilon 3 --delta 1e-5 --rounds 2000 --restart-interval 20 "
                     "--clients 10 --n-min 1651 --u 1.25 --method paper"),
    "diff2-bvr": Spec((Opt("--rounds", "rounds", int, "rounds R"),
                       Opt("--restart-interval", "restart_interval", int, "restart interval T"),
                       Opt("--clients", "clients", int, "clients P"),
                       Opt("--n-min", "n_min", int, "smallest local dataset n_min"),
                       Opt("--local-steps", "local_steps", int, "local steps K"),
                       Opt("--batch-size", "batch_size", int, "local minibatch b (without replacement)"),
                       Opt("--u1", "u1", float, "budget split u1 (Prop. E.2)", 3.0, "split"),
                       Opt("--u2", "u2", float, "budget split u2 (Prop. E.2)", 3.0, "split")),
                      ("sigma1", "sigma2", "sigma3"), "rounds",
                      "dpcalib calibrate diff2-bvr --epsilon 3 --delta 1e-5 --rounds 2000 --restart-interval 20 "
                      "--clients 10 --n-min 1651 --local-steps 5 --batch-size 13"),
    "dp-sgd": Spec((Opt("--sampling-rate", "sampling_rate", float, "Poisson sampling rate q = B/N"),
                    Opt("--steps", "steps", int, "steps T")),
                   ("noise_multiplier",), "steps",
                   "dpcalib calibrate dp-sgd --epsilon 2 --delta 1e-5 --sampling-rate 0.02 --steps 150"),
    "dp-srm": Spec((Opt("--n", "n", int, "dataset size n"), Opt("--steps", "steps", int, "iterations T"),
                    Opt("--b0", "b0", int, "first batch b0"), Opt("--b", "b", int, "batch b"),
                    Opt("--lipschitz", "lipschitz", float, "G (or clip C1)", 1.0),
                    Opt("--step-bound", "step_bound", float, "zeta/n0 (or clip C2)", 0.01),
                    Opt("--momentum", "momentum", float, "momentum gamma in (0, 1]", 0.01),
                    Opt("--beta", "beta", float, "budget split beta (paper mode)", 0.5, "split")),
                   ("sigma0", "sigma"), "steps",
                   "dpcalib calibrate dp-srm --epsilon 0.5 --delta 1e-5 --n 49990 --steps 100 --b0 256 --b 64"),
    "dicesgd": Spec((Opt("--n", "N", int, "dataset size N"), Opt("--batch-size", "batch_size", int, "batch B"),
                     Opt("--steps", "steps", int, "iterations T"), Opt("--c1", "C1", float, "clip C1", 1.0),
                     Opt("--c2", "C2", float, "error-feedback clip C2 (average scale)", 1.0),
                     Opt("--c", "C", float, "constant C with B*C2 <= C (default B*C2)", None),
                     Opt("--g-prime", "G_prime", float, "G' if known (default inf)", float("inf")),
                     Opt("--automatic", "automatic", bool, "automatic variant (Algorithm 4)", False)),
                    ("sigma1",), "steps",
                    "dpcalib calibrate dicesgd --epsilon 2 --delta 1e-5 --n 50000 --batch-size 1000 --steps 150 "
                    "--c1 1 --c2 1 --c 1 --method both"),
    "clipd2p": Spec((Opt("--samples-per-node", "samples_per_node", int, "samples per node J"),
                     Opt("--iterations", "iterations", int, "iterations K"),
                     Opt("--relation", "relation", str, "add/remove (Poisson) or replace-one", "add/remove")),
                    ("sigma",), "iterations",
                    "dpcalib calibrate clipd2p --epsilon 1 --delta 1e-5 --samples-per-node 2500 --iterations 3500"),
    "constd2p": Spec((Opt("--samples-per-node", "samples_per_node", int, "samples per node J"),
                      Opt("--iterations", "iterations", int, "iterations K"),
                      Opt("--relation", "relation", str, "add/remove (Poisson) or replace-one", "add/remove")),
                     ("sigma",), "iterations",
                     "dpcalib calibrate constd2p --epsilon 1 --delta 1e-5 --samples-per-node 2500 --iterations 3500"),
    "adad2p": Spec((Opt("--samples-per-node", "samples_per_node", int, "samples per node J", 1),
                    Opt("--iterations", "iterations", int, "iterations K", 1)),
                   ("sigma",), None, "dpcalib calibrate adad2p --epsilon 1 --delta 1e-5   (refused: no guarantee)"),
}
