"""A tenant admin's own kubeconfig: a short-lived client certificate through the Kubernetes CSR API.

The key is made here, on the controller, and never leaves it except inside the kubeconfig
written for the user (mode 0600 from the moment it exists). The cluster sees only the
certificate signing request: CN = the user name the tenant's RoleBinding names
(rackform.k8s.manifests.tenant_manifests binds users, no group, so the request carries no O:
a group would grant nothing, and a group binding would let any certificate naming the group
act as every admin of the tenant). The request goes to the `kubernetes.io/kube-apiserver-client`
signer with `expirationSeconds`; the admin kubeconfig approves it, the certificate is read
back, and the CSR object is deleted (it holds only public parts, but it would pile up).

The steps, with kubectl through the allowed environment (rackform.process_environment):
`create -f -` (the CSR object on stdin), `certificate approve`, `get csr -o json` until
`.status.certificate` is set (bounded: CERTIFICATE_WAIT_S), `delete csr`, which runs even
when a step before it failed.

Kubernetes documents the signer and the API: "Certificates and Certificate Signing Requests"
(kubernetes.io/docs/reference/access-authn-authz/certificate-signing-requests/). A signed
client certificate cannot be revoked before it expires (the API server keeps no revocation
list for client certificates): hence hours, never months (docs/security.md).
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from rackform.process_environment import tool_environment

SIGNER = "kubernetes.io/kube-apiserver-client"
"""The built-in signer of client certificates the API server trusts (kube-controller-manager signs)."""
USAGES = ("client auth",)
KEY_CURVE = ec.SECP256R1
"""NIST P-256: what Go's TLS client (kubectl) and the API server take, and made in milliseconds."""
HOURS_MIN, HOURS_MAX, HOURS_DEFAULT = 1, 24, 8
CERTIFICATE_WAIT_S = 60.0
"""How long the signer may take to answer an approved request (it answers in about a second)."""
POLL_INTERVAL_S = 1.0
KUBECTL_TIMEOUT_S = 60
FILE_MODE = 0o600


class CredentialError(Exception):
    """The kubeconfig could not be issued; the message says why and never holds the key."""


@dataclass(frozen=True, slots=True)
class Issued:
    path: Path
    user: str
    namespace: str
    expires: datetime
    """When the certificate stops working (UTC), as the signer set it."""
    left_over: str | None = None
    """Why the CSR object could not be deleted (None: it was)."""


def private_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(KEY_CURVE())


def signing_request(user: str, key: ec.EllipticCurvePrivateKey) -> bytes:
    """A PEM CSR for `user` (CN) and nothing else: no group (O), no CA, no extensions; the
    signer sets the usages and the lifetime from the CSR object."""
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, user)])
    request = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    return request.public_bytes(serialization.Encoding.PEM)


def safe_name(text: str) -> str:
    """`text` as a DNS label piece (a CSR's name, a file's name): lower case, `-` for anything else."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def request_name(namespace: str, user: str) -> str:
    """Unique per call: two people issuing at once never share (or delete) one CSR object."""
    return f"rackform-{safe_name(namespace)}-{safe_name(user)}-{secrets.token_hex(6)}"[:253]


def csr_manifest(name: str, request_pem: bytes, seconds: int) -> dict:
    return {
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "rackform"}},
        "spec": {"request": base64.b64encode(request_pem).decode("ascii"), "signerName": SIGNER,
                 "expirationSeconds": seconds, "usages": list(USAGES)},
    }


@dataclass(frozen=True, slots=True)
class AdminCluster:
    """The admin kubeconfig's cluster entry: its name and its `cluster:` mapping as written."""

    name: str
    cluster: dict


def admin_cluster(kubeconfig: Path) -> AdminCluster:
    """The cluster of the admin kubeconfig's current context (or its only cluster). A CA given
    as a file is embedded as data, so the tenant's kubeconfig stands alone."""
    try:
        config = yaml.safe_load(kubeconfig.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CredentialError(f"{kubeconfig}: cannot read the admin kubeconfig: {exc}") from None
    if not isinstance(config, dict):
        raise CredentialError(f"{kubeconfig}: expected a kubeconfig (a mapping)")
    clusters = {entry.get("name"): entry.get("cluster") for entry in config.get("clusters") or []
                if isinstance(entry, dict)}
    contexts = {entry.get("name"): entry.get("context") or {} for entry in config.get("contexts") or []
                if isinstance(entry, dict)}
    current = config.get("current-context")
    if current in contexts:
        name = contexts[current].get("cluster")
    elif len(clusters) == 1:
        name = next(iter(clusters))
    else:
        raise CredentialError(f"{kubeconfig}: no current-context and not exactly one cluster: which cluster is "
                              f"the site's?")
    cluster = clusters.get(name)
    if not isinstance(cluster, dict) or not cluster.get("server"):
        raise CredentialError(f"{kubeconfig}: cluster {name!r} has no server")
    cluster = dict(cluster)
    if "certificate-authority" in cluster and "certificate-authority-data" not in cluster:
        ca_path = Path(cluster.pop("certificate-authority"))
        ca_path = ca_path if ca_path.is_absolute() else kubeconfig.parent / ca_path
        try:
            cluster["certificate-authority-data"] = base64.b64encode(ca_path.read_bytes()).decode("ascii")
        except OSError as exc:
            raise CredentialError(f"{kubeconfig}: the cluster's CA {ca_path}: {exc}") from None
    return AdminCluster(str(name), cluster)


def tenant_kubeconfig(admin: AdminCluster, user: str, namespace: str, certificate_pem: bytes,
                      key: ec.EllipticCurvePrivateKey) -> dict:
    """A kubeconfig for `user`: the admin's cluster entry, the user's certificate and key, a
    context in the tenant's namespace."""
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    context = f"{user}@{namespace}"
    return {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": admin.name, "cluster": admin.cluster}],
        "users": [{"name": context, "user": {
            "client-certificate-data": base64.b64encode(certificate_pem).decode("ascii"),
            "client-key-data": base64.b64encode(key_pem).decode("ascii")}}],
        "contexts": [{"name": context, "context": {"cluster": admin.name, "user": context, "namespace": namespace}}],
        "current-context": context,
    }


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` with mode 0600 from its first byte: a new file opened with that
    mode beside `path` (O_EXCL: never someone else's), then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        os.fchmod(descriptor, FILE_MODE)  # exactly 0600 whatever the umask took away
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


class _Kubectl:
    """kubectl with the admin kubeconfig; every failure a CredentialError naming the step."""

    def __init__(self, kubectl: str, kubeconfig: Path):
        self.argv = [kubectl, "--kubeconfig", str(kubeconfig)]

    def __call__(self, *argv: str, stdin: str | None = None, what: str) -> str:
        try:
            result = subprocess.run([*self.argv, *argv], input=stdin, capture_output=True, text=True,
                                    timeout=KUBECTL_TIMEOUT_S, check=False, env=tool_environment("kubectl"))
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CredentialError(f"{what}: kubectl: {exc}") from None
        if result.returncode != 0:
            raise CredentialError(f"{what}: {(result.stderr or result.stdout).strip() or 'kubectl failed'}")
        return result.stdout


def _certificate(kubectl: _Kubectl, name: str, wait_s: float, sleep: Callable[[float], None]) -> bytes:
    """The signed certificate of CSR `name` once the signer set it; CredentialError when it was
    denied or failed, or after `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            status = json.loads(kubectl("get", "csr", name, "-o", "json", what=f"reading CSR {name}")).get("status") or {}
        except ValueError:
            raise CredentialError(f"reading CSR {name}: kubectl printed no JSON") from None
        if status.get("certificate"):
            return base64.b64decode(status["certificate"])
        for condition in status.get("conditions") or []:
            if condition.get("type") in ("Denied", "Failed") and condition.get("status", "True") == "True":
                raise CredentialError(f"CSR {name} {condition['type'].lower()}: "
                                      f"{condition.get('message') or condition.get('reason') or 'no reason given'}")
        if time.monotonic() >= deadline:
            raise CredentialError(f"CSR {name}: approved, but no certificate within {wait_s:g} s: is "
                                  f"kube-controller-manager running with its signing CA "
                                  f"(--cluster-signing-cert-file)?")
        sleep(POLL_INTERVAL_S)


def _check_certificate(pem: bytes, user: str, key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    """What came back is a certificate for our key and our user, not yet expired."""
    try:
        certificate = x509.load_pem_x509_certificate(pem)
    except ValueError:
        raise CredentialError("the signer returned something that is not a PEM certificate") from None
    ours = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    theirs = certificate.public_key().public_bytes(serialization.Encoding.DER,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo)
    names = [attribute.value for attribute in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if ours != theirs or names != [user]:
        raise CredentialError(f"the signed certificate is not for this request (subject {certificate.subject.rfc4514_string()})")
    return certificate


def issue(*, kubectl: str, admin_kubeconfig: Path, user: str, namespace: str, hours: int, output: Path,
          wait_s: float | None = None, sleep: Callable[[float], None] = time.sleep) -> Issued:
    """Issue `user` a client certificate valid `hours` and write their kubeconfig to `output`;
    wait at most `wait_s` (default CERTIFICATE_WAIT_S) for the signer."""
    if not HOURS_MIN <= hours <= HOURS_MAX:
        raise CredentialError(f"{hours} hours: expected {HOURS_MIN} to {HOURS_MAX}")
    admin = admin_cluster(admin_kubeconfig)
    key = private_key()
    name = request_name(namespace, user)
    run = _Kubectl(kubectl, admin_kubeconfig)
    manifest = csr_manifest(name, signing_request(user, key), hours * 3600)
    created, left_over = False, None
    try:
        run("create", "-f", "-", stdin=json.dumps(manifest), what=f"creating CSR {name}")
        created = True
        run("certificate", "approve", name, what=f"approving CSR {name}")
        signed = _certificate(run, name, CERTIFICATE_WAIT_S if wait_s is None else wait_s, sleep)
        certificate = _check_certificate(signed, user, key)
    finally:
        if created:
            try:
                run("delete", "csr", name, "--ignore-not-found", what=f"deleting CSR {name}")
            except CredentialError as exc:
                left_over = str(exc)  # it holds no secret; an error that brought us here matters more
    config = tenant_kubeconfig(admin, user, namespace, certificate.public_bytes(serialization.Encoding.PEM), key)
    write_private(output, yaml.safe_dump(config, sort_keys=False))
    return Issued(output, user, namespace, certificate.not_valid_after_utc, left_over)
