"""Strict offline validation of the platform's objects, built-in and custom.

Built-in kinds: kubernetes-validate --strict for the site's Kubernetes version.
Custom resources: the openAPIV3Schema of their CRD as the repo carries it
(rackform/k8s/rdma.py NAD_SCHEMA, source named there), made strict the way the API
server's strict field validation treats a structural schema (an unknown field is an
error), plus Kubernetes' own ObjectMeta for their metadata. A kind with neither
schema raises SchemaNotFoundError instead of passing unchecked.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate

from rackform.k8s.alerts import PROMETHEUS_RULE_SCHEMA
from rackform.k8s.rdma import NAD_GROUP, NAD_KIND, NAD_SCHEMA

CRD_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    (f"{NAD_GROUP}/v1", NAD_KIND): NAD_SCHEMA,
    ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUS_RULE_SCHEMA,
}


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with `additionalProperties: false` on every object that lists its properties."""
    result = dict(schema)
    if "properties" in result:
        result["properties"] = {key: strict_schema(value) for key, value in result["properties"].items()}
        result.setdefault("additionalProperties", False)
    if isinstance(result.get("items"), dict):
        result["items"] = strict_schema(result["items"])
    return result


def problems(manifest: dict[str, Any], kubernetes_version: str) -> list[str]:
    """Every reason the API server would refuse this object under strict field validation."""
    name = f"{manifest.get('kind')}/{manifest.get('metadata', {}).get('name')}"
    schema = CRD_SCHEMAS.get((manifest.get("apiVersion"), manifest.get("kind")))
    if schema is None:
        try:
            kubernetes_validate.validate(manifest, kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as error:
            return [f"{name}: {error.message}"]
        return []
    found = [f"{name}: {'.'.join(map(str, e.path))}: {e.message}"
             for e in jsonschema.Draft202012Validator(strict_schema(schema)).iter_errors(manifest)]
    # ObjectMeta is the same for every kind: checked on a ConfigMap carrying this metadata.
    carrier = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": manifest.get("metadata", {})}
    try:
        kubernetes_validate.validate(carrier, kubernetes_version, strict=True)
    except kubernetes_validate.ValidationError as error:
        found.append(f"{name}: metadata: {error.message}")
    return found
