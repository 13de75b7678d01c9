"""The version matrix under its former name: it is read with the design, so it lives in the
model (`rackform.model.versions`). Kept for the callers that still import it from here, the
Pulumi program among them; new code imports `rackform.model.versions`."""

from rackform.model.versions import (CONTROL_PLANE_IMAGES, KUBERNETES_PACKAGES, MATRIX_PATH, CarriedRelease, Component,
                                     Conflict, Incompatible, Matrix, Pinned, Release, conflicts, kubernetes_minor,
                                     load_matrix)

__all__ = ["CONTROL_PLANE_IMAGES", "KUBERNETES_PACKAGES", "MATRIX_PATH", "CarriedRelease", "Component", "Conflict",
           "Incompatible", "Matrix", "Pinned", "Release", "conflicts", "kubernetes_minor", "load_matrix"]
