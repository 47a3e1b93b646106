"""The papers' experiments on real data that installs offline (docs/how-to/reproduce-papers.md)."""
