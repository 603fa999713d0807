"""Vendor operators, simulated: GPU Operator, Network Operator, SR-IOV, OLM, OpenShift, DCGM exporter, Argo CD.

Imports ``machinery``, ``apiserver`` and ``kube``; never the harness.
"""
