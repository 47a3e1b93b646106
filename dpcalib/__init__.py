"""dpcalib: privacy accounting and noise calibration for DP nonconvex optimizers.

The library lives in the top-level packages ``accountant`` (numpy/scipy only), ``mechanisms``
and ``optim`` (torch); this package holds the command-line entry point.
"""

__version__ = "0.1.0"
