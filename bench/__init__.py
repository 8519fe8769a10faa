"""Lakeline benchmarks (run with `python -m bench.drain`, see bench/README.md)."""
