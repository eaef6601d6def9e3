"""Benchmarks and the load-test harness; they sit on top of every other package."""
