"""Simulated behaviour of a GPU cluster: kubelet, workload controllers, GPU Operator, faults, recorder."""
