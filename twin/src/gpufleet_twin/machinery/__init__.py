"""The twin's machinery: the object store, resource registry, patches, selectors, CRD schemas, simulated clock.

Pure data structures and algorithms that the API server and every controller
share.  Nothing here imports the twin's other layers.
"""
