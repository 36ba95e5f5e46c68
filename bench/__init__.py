"""Benchmarks: `python -m bench` runs every measure beside its raw baseline; the bench_*.py scripts
each print their own table (`python bench/bench_runlog.py`)."""
