"""rackform: from cabled racks to a GPU Kubernetes cluster, as code."""

__version__ = "0.1.0"
