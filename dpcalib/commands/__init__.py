"""The commands of the ``dpcalib`` command line, one module per command (:mod:`.list`, :mod:`.calibrate`,
:mod:`.epsilon`, :mod:`.compare`, :mod:`.account`, :mod:`.report`, :mod:`.audit`, :mod:`.probe`,
:mod:`.train`), each run through ``run(args)`` and, on an algorithm, adding its own options
(``add_arguments(parser, algorithm)``), and what they share: :mod:`.common` (the error types,
the one-line parser, ``--plot``, ``--accountant``, how an eps is chosen, checked finite and
printed), :mod:`.algorithms` (each algorithm's options, derived from its mechanism and the registry)
and :mod:`.limits` (the ceilings on the work of the commands that train, each with its reason).  :mod:`dpcalib.cli` parses the
command and dispatches here.

May import: :mod:`dpcalib.accountant`, :mod:`dpcalib.mechanisms`, and :mod:`dpcalib.optim` (torch)
only inside the commands that train (``audit``, ``probe``, ``train``), so that accounting and
calibration never import torch.
"""
