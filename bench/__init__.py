"""Benchmarks: run against the twin, results under bench/results/ (git-ignored)."""
