"""Decisions of a ValidatingAdmissionPolicy, by the API server's own code: tests/unit/vap_eval
(Go, k8s.io/apiserver at the lab's Kubernetes release) compiles the policy as the API server
does and runs requests through its matchConditions, variables, validations and messages.

Built with the Go toolchain once per version of its sources, into the temp folder, where every
test process finds it (the first build on a machine fetches and compiles k8s.io/apiserver:
minutes; later ones come from Go's caches). Without `go`, the tests that need
it skip, saying so. The policy's matchConstraints (which resources, which namespaces) and its
binding are the dispatcher's and not run here: the tests check them by their shape.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HARNESS = Path(__file__).resolve().parent / "vap_eval"
BUILD_TIMEOUT_S = 1800
COMPILE_ERRORS = 3
"""vap_eval's exit status for a policy with an expression that does not compile."""


@dataclass(frozen=True)
class Request:
    """One admission request, as the API server hands it to the policy."""

    operation: str
    group: str
    version: str
    resource: str
    kind: str
    namespace: str
    object: dict[str, Any] | None
    user: str
    groups: tuple[str, ...] = ("system:authenticated",)
    old_object: dict[str, Any] | None = None
    namespace_object: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"operation": self.operation,
                "resource": {"group": self.group, "version": self.version, "resource": self.resource},
                "kind": {"group": self.group, "version": self.version, "kind": self.kind},
                "namespace": self.namespace, "name": ((self.object or self.old_object or {}).get("metadata") or {}).get("name", ""),
                "object": self.object, "oldObject": self.old_object,
                "user": {"name": self.user, "groups": list(self.groups)},
                "namespaceObject": self.namespace_object or {"metadata": {"name": self.namespace}}}


@dataclass(frozen=True)
class Decision:
    matched: bool
    denied: bool
    messages: list[str]
    errors: list[str]


@functools.cache
def _binary() -> Path:
    """The built evaluator: one per version of its sources, shared by the test processes (pytest's
    workers) through the temp folder, each build written aside and moved into place whole."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("needs the Go toolchain to build tests/unit/vap_eval (the API server's policy code)")
    sources = hashlib.sha256(b"".join((HARNESS / name).read_bytes() for name in ("main.go", "go.mod", "go.sum")))
    out = Path(tempfile.gettempdir()) / f"rackform-vap-eval-{sources.hexdigest()[:16]}"
    if out.exists():
        return out
    building = out.with_name(f"{out.name}.{os.getpid()}")
    env = {**os.environ, "GOFLAGS": "-mod=readonly -buildvcs=false", "CGO_ENABLED": "0"}
    built = subprocess.run([go, "build", "-o", str(building), "."], cwd=HARNESS, env=env, capture_output=True,
                           text=True, timeout=BUILD_TIMEOUT_S, check=False)
    if built.returncode != 0:
        raise AssertionError(f"go build tests/unit/vap_eval failed:\n{built.stderr[-3000:]}")
    os.replace(building, out)
    return out


def decide(policy: dict[str, Any], *requests: Request) -> list[Decision]:
    """Each request's decision under `policy`, in order."""
    given = json.dumps({"policy": policy, "requests": [request.as_json() for request in requests]})
    ran = subprocess.run([str(_binary())], input=given, capture_output=True, text=True, timeout=120, check=False)
    if ran.returncode == COMPILE_ERRORS:
        raise AssertionError(f"the API server would refuse this policy:\n{ran.stderr[-3000:]}")
    if ran.returncode != 0:
        raise AssertionError(f"vap_eval failed: {ran.stderr[-3000:]}")
    return [Decision(**found) for found in json.loads(ran.stdout)]
