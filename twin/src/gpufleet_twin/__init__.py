"""gpufleet_twin: a simulated GPU Kubernetes/OpenShift cluster.

It speaks the real Kubernetes REST API (so kubectl and the ``kubernetes``
client work against it unchanged) and, for the platforms issue, iDRAC-like
Redfish BMCs.  The collection's plugins never import this package; tests,
the demo and the benchmarks start it as a separate process.
"""

__version__ = "0.1.0"
