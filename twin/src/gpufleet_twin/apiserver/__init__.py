"""The twin's Kubernetes API server: the ``Twin`` object, the HTTP app, admission, RBAC, OpenAPI, built-in types.

Imports ``machinery`` only; controllers plug into ``cluster.Twin`` without the
server knowing them.
"""
