"""The papers' experiments on real data that installs offline (docs/experiments.md)."""
