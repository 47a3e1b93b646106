"""User mistakes end in one line on stderr and exit 2, before any work starts; a reader that goes
away ends the command quietly; dependencies' warnings are not relabelled as dpcalib's."""

import subprocess
import sys
import warnings

import pytest

import dpcalib.cli as cli
from dpcalib.cli import main

EPS_ARGS = ["epsilon", "dp-sgd", "--delta", "1e-5", "--noise-multiplier", "1.1", "--sampling-rate", "0.02",
            "--steps", "150"]
AUDIT_ARGS = ["audit", "dp-gd", "--epsilon", "2", "--delta", "1e-5", "--rounds", "4", "--clients", "2", "--n-min", "5",
              "--runs", "100", "--no-progress"]


def _one_line_exit_2(capsys, argv, *needles):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("dpcalib: error:"), err
    for n in needles:
        assert n in err, err
    return err


def _no_work(monkeypatch):
    import importlib

    def refuse(*a, **k):
        raise AssertionError("work started")
    for name in ("epsilon", "audit", "calibrate", "compare"):
        monkeypatch.setattr(importlib.import_module(f"dpcalib.commands.{name}"), "run", refuse)


@pytest.mark.parametrize("argv", [EPS_ARGS, AUDIT_ARGS], ids=["epsilon", "audit"])
def test_a_plot_in_a_missing_folder_or_of_an_unknown_format_is_refused_before_any_work(argv, capsys, monkeypatch,
                                                                                       tmp_path):
    _no_work(monkeypatch)
    _one_line_exit_2(capsys, argv + ["--plot", str(tmp_path / "missing" / "x.png")], "does not exist")
    _one_line_exit_2(capsys, argv + ["--plot", str(tmp_path / "out.txt")], "--plot=", ".png")


def test_options_are_not_abbreviated(capsys, monkeypatch):
    _no_work(monkeypatch)
    argv = ["epsilon", "dp-sgd", "--delta", "1e-5", "--noise-multiplier", "1.1", "--sampling-r", "0.02", "--steps", "150"]
    _one_line_exit_2(capsys, argv, "--sampling-r")
    # --sampling is an option of its own (poisson|shuffle): a rate given to it is refused, not read as --sampling-rate
    argv = ["epsilon", "dp-sgd", "--delta", "1e-5", "--noise-multiplier", "1.1", "--sampling", "0.02", "--steps", "150"]
    _one_line_exit_2(capsys, argv, "--sampling", "poisson", "shuffle")


def test_train_refuses_bad_options_before_starting_a_process(capsys, monkeypatch, tmp_path):
    pytest.importorskip("torch")
    import multiprocessing

    def no_spawn(*a, **k):
        raise AssertionError("a process was started")
    monkeypatch.setattr(multiprocessing, "get_context", no_spawn)
    base = ["train", "diff2-gd", "--epsilon", "3", "--delta", "1e-5", "--rounds", "4", "--restart-interval", "2",
            "--world-size", "2"]
    _one_line_exit_2(capsys, base + ["--lr", "-1"], "--lr=-1")
    _one_line_exit_2(capsys, base + ["--checkpoint", str(tmp_path / "missing" / "ck")], "does not exist")
    _one_line_exit_2(capsys, base + ["--checkpoint", str(tmp_path / "ck"), "--resume"], "--resume")
    _one_line_exit_2(capsys, base + ["--hidden", "0"], "--hidden=0")
    _one_line_exit_2(capsys, base + ["--lr", "0.1", "--epsilon", "-3"], "epsilon=-3")


def test_every_option_has_help_and_a_readable_metavar():
    from dpcalib.commands.algorithms import SPECS
    from dpcalib.commands.train import parser as train_parser

    parsers = [cli._algo_parser(c, a) for c in ("calibrate", "epsilon", "compare") for a in SPECS]
    from dpcalib.commands.account import account_parser

    parsers = parsers + [account_parser(), train_parser()]
    for p in parsers:
        for act in p._actions:
            if act.dest == "help":
                continue
            assert act.help and "``" not in act.help, (p.prog, act.option_strings)
        text = p.format_help()
        assert "NOISE_NOISE" not in text and "``" not in text, p.prog


def test_a_closed_pipe_ends_quietly():
    # the reader goes away before the command writes: no traceback, exit 0 (as `| head` expects)
    p = subprocess.Popen([sys.executable, "-m", "dpcalib", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_compare_relays_only_dpcalibs_own_warnings_and_shows_progress(capsys, monkeypatch):
    from dpcalib.accountant import PrivacyAccountant

    real = PrivacyAccountant.cross_check

    def noisy(self, delta):
        warnings.warn("Optimal order is the largest alpha.", UserWarning)        # what Opacus says
        warnings.warn("divide by zero encountered in log", RuntimeWarning)       # what numpy says
        return real(self, delta)
    monkeypatch.setattr(PrivacyAccountant, "cross_check", noisy)
    bars = []

    class Bar:
        def __init__(self, total=None, **kw):
            self.total, self.done, self.desc = total, 0, kw.get("desc", "")
            bars.append(self)

        def update(self, n):
            self.done += n

        def close(self):
            pass
    import tqdm.auto
    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    rc = main(["compare", "dp-srm", "--epsilon", "0.5", "--delta", "1e-5", "--n", "2000", "--steps", "10", "--b0", "64",
               "--b", "16"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "Optimal order" not in err and "divide by zero" not in err, err
    assert "[DPSRM-" in err              # dpcalib's own paper-condition warnings are still said
    (bar,) = [b for b in bars if b.desc.startswith("compare")]
    assert bar.total == bar.done == 6


def test_the_exit_code_follows_the_type_of_the_error(capsys, monkeypatch):
    from dpcalib.accountant.validation import InputError
    from dpcalib.mechanisms import DPSGD

    args = ["calibrate", "dp-sgd", "--epsilon", "2", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "10"]
    monkeypatch.setattr(DPSGD, "calibrate", lambda *a, **k: (_ for _ in ()).throw(InputError("x=1 is not allowed")))
    assert main(args) == 2 and "dpcalib: error: x=1 is not allowed" in capsys.readouterr().err
    monkeypatch.setattr(DPSGD, "calibrate", lambda *a, **k: (_ for _ in ()).throw(ValueError("math domain error")))
    assert main(args) == 1 and "internal error" in capsys.readouterr().err


def test_every_command_has_its_module_and_one_run_signature():
    """Each command of the top-level table is one module of dpcalib.commands, run through run(args); the
    commands on an algorithm add their own options (add_arguments(parser, algorithm))."""
    import inspect

    for command in cli.COMMANDS:
        module = cli._command(command)
        assert module.__name__ == f"dpcalib.commands.{command}", (command, module.__name__)
        assert len(inspect.signature(module.run).parameters) == 1, command
        if command not in ("list", "account", "train"):
            assert list(inspect.signature(module.add_arguments).parameters) == ["p", "algorithm"], command
