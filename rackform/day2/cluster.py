"""The site's Kubernetes cluster, as day 2 drives it: `rackform.run.cluster`, under the name the
day-2 commands import it by (the stage runner, below day 2, needs it too)."""

from rackform.run.cluster import DRAIN_TIMEOUT_S, Cluster, find

__all__ = ["DRAIN_TIMEOUT_S", "Cluster", "find"]
