"""What builds and drives a twin for tests: build, seed, scenarios, faults, recorder, snapshots.

May import every layer below it; only the composition root (``cli``, ``estimate``) imports it.
"""
