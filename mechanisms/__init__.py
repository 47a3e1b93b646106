"""Mechanism descriptions of each paper's noise schedule (built on :mod:`accountant`).

Populated by the calibration work (DIFF2-GD, DIFF2-BVR-L-SGD, DP-SGD, DP-SRM, DiceSGD, ClipD2P).
"""
