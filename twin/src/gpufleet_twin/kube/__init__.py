"""Kubernetes' own controllers, simulated: kubelet, scheduler, node lifecycle, workload controllers, events.

Imports ``machinery`` and ``apiserver``; never the vendor operators or the harness.
"""
