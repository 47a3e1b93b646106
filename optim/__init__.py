"""PyTorch reference optimizers driven by the calibrated noise (built on :mod:`mechanisms`)."""
