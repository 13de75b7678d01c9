"""`rackform kubeconfig`: a tenant admin's own kubeconfig through the CSR API (rackform.run.tenant_credentials).

The cluster is a stand-in: a fake `kubectl` first on PATH, written here, that records each
call (argv, stdin, the environment it got) and plays the API server and the signer: it keeps
the CSR object it was given, and once approved answers it with a certificate signed by a
throwaway CA made here, valid `expirationSeconds`. How it answers (sign, never sign, deny) is
a file beside it: the environment kubectl gets is an allow-list, so a variable could not reach it.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from rackform import installed_tools
from rackform.cli import main
from rackform.run import tenant_credentials
from rackform.run.tenant_credentials import SIGNER, safe_name, signing_request

SERVER = "https://10.10.0.5:6443"
SECRET_VARIABLE = "RACKFORM_TEST_API_TOKEN"

FAKE_KUBECTL = '''#!{python}
import base64, datetime, json, os, sys
from pathlib import Path
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

STATE = Path({state!r})
argv = sys.argv[1:]
stdin = sys.stdin.read() if argv[2:5] == ["create", "-f", "-"] else None
with open(STATE / "calls.jsonl", "a") as log:
    log.write(json.dumps({{"argv": argv, "stdin": stdin, "env": dict(os.environ)}}) + "\\n")
mode = (STATE / "mode").read_text().strip()
command = argv[2:]
if command[:3] == ["create", "-f", "-"]:
    if mode == "refuse-create":
        sys.exit("Error from server (Forbidden): certificatesigningrequests is forbidden")
    manifest = json.loads(stdin)
    (STATE / ("csr-" + manifest["metadata"]["name"])).write_text(stdin)
    print("certificatesigningrequest.certificates.k8s.io/" + manifest["metadata"]["name"] + " created")
elif command[:2] == ["certificate", "approve"]:
    (STATE / ("approved-" + command[2])).write_text("yes")
    print("certificatesigningrequest.certificates.k8s.io/" + command[2] + " approved")
elif command[:2] == ["get", "csr"]:
    name = command[2]
    manifest = json.loads((STATE / ("csr-" + name)).read_text())
    status = {{}}
    if mode == "deny":
        status = {{"conditions": [{{"type": "Denied", "status": "True", "message": "not today"}}]}}
    elif mode == "sign" and (STATE / ("approved-" + name)).exists():
        request = x509.load_pem_x509_csr(base64.b64decode(manifest["spec"]["request"]))
        ca_key = serialization.load_pem_private_key((STATE / "ca.key").read_bytes(), None)
        ca = x509.load_pem_x509_certificate((STATE / "ca.crt").read_bytes())
        now = datetime.datetime.now(datetime.timezone.utc)
        certificate = (x509.CertificateBuilder().subject_name(request.subject).issuer_name(ca.subject)
                       .public_key(request.public_key()).serial_number(x509.random_serial_number())
                       .not_valid_before(now - datetime.timedelta(minutes=5))
                       .not_valid_after(now + datetime.timedelta(seconds=manifest["spec"]["expirationSeconds"]))
                       .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                       .sign(ca_key, hashes.SHA256()))
        pem = certificate.public_bytes(serialization.Encoding.PEM)
        status = {{"certificate": base64.b64encode(pem).decode()}}
    manifest["status"] = status
    print(json.dumps(manifest))
elif command[:2] == ["delete", "csr"]:
    (STATE / ("csr-" + command[2])).unlink(missing_ok=True)
    print("certificatesigningrequest.certificates.k8s.io/" + command[2] + " deleted")
else:
    sys.exit("fake kubectl: unexpected " + " ".join(argv))
'''


class Cluster:
    """The fake cluster: its CA, its kubectl's state folder, the admin kubeconfig."""

    def __init__(self, folder: Path, admin_kubeconfig: Path):
        self.state = folder / "state"
        self.state.mkdir()
        self.admin_kubeconfig = admin_kubeconfig
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
        now = datetime.now(timezone.utc)
        self.ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(self.ca_key.public_key()).serial_number(1)
                   .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=30))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(self.ca_key, hashes.SHA256()))
        self.ca_pem = self.ca.public_bytes(serialization.Encoding.PEM)
        (self.state / "ca.crt").write_bytes(self.ca_pem)
        (self.state / "ca.key").write_bytes(self.ca_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        self.answer("sign")
        bin_dir = folder / "bin"
        bin_dir.mkdir()
        kubectl = bin_dir / "kubectl"
        kubectl.write_text(FAKE_KUBECTL.format(python=sys.executable, state=str(self.state)), encoding="utf-8")
        kubectl.chmod(0o755)
        self.bin_dir = bin_dir

    def answer(self, mode: str) -> None:
        (self.state / "mode").write_text(mode)

    def write_admin_kubeconfig(self) -> None:
        self.admin_kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        self.admin_kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "lab", "cluster": {
                "server": SERVER, "certificate-authority-data": base64.b64encode(self.ca_pem).decode()}}],
            "users": [{"name": "kubernetes-admin", "user": {"client-certificate-data": "QURNSU4=",
                                                            "client-key-data": "QURNSU4tS0VZ"}}],
            "contexts": [{"name": "kubernetes-admin@lab", "context": {"cluster": "lab", "user": "kubernetes-admin"}}],
            "current-context": "kubernetes-admin@lab",
        }), encoding="utf-8")

    def calls(self) -> list[dict]:
        log = self.state / "calls.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def commands(self) -> list[list[str]]:
        """Each call's argv after `--kubeconfig PATH`."""
        return [call["argv"][2:] for call in self.calls()]

    def csr_objects(self) -> list[Path]:
        return sorted(self.state.glob("csr-*"))


@pytest.fixture(scope="module")
def root(make_site_files, tmp_path_factory) -> Path:
    """The shipped lab's inputs, loaded by every test but changed by none."""
    return make_site_files(tmp_path_factory.mktemp("root")).root


@pytest.fixture()
def cluster(root, tmp_path, monkeypatch) -> Cluster:
    """The fake cluster, its kubectl the one rackform finds (nothing beside rackform, first on
    PATH), the site's admin kubeconfig where the kubernetes stage leaves it."""
    fake = Cluster(tmp_path, root / "build" / "lab" / "artifacts" / "kubeconfig")
    fake.write_admin_kubeconfig()
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setattr(installed_tools, "environment_bin", lambda: empty)
    monkeypatch.setenv("PATH", f"{fake.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv(SECRET_VARIABLE, "must-not-reach-kubectl")
    monkeypatch.setattr(tenant_credentials, "POLL_INTERVAL_S", 0.01)
    yield fake
    fake.admin_kubeconfig.unlink(missing_ok=True)


def kubeconfig(root: Path, *args: str) -> int:
    return main(["kubeconfig", "lab", "--root", str(root), *args])


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(("args", "said"), [
    (["--tenant", "physics", "--user", "alice"],
     "'physics' is not a tenant of topologies/platform/lab.yaml: its tenants are research, inference"),
    (["--tenant", "inference", "--user", "alice"],
     "platform.tenants[1].admins: 'alice' is not an admin of tenant inference (its admins: carol)"),
    (["--tenant", "research", "--user", "mallory"], "'mallory' is not an admin of tenant research"),
    (["--tenant", "research", "--user", "alice", "--hours", "0"], "--hours: 0: expected 1 to 24"),
    (["--tenant", "research", "--user", "alice", "--hours", "25"], "--hours: 25: expected 1 to 24"),
])
def test_bad_input_is_refused_and_nothing_happens(root, cluster, capsys, tmp_path, args, said):
    output = tmp_path / "out"
    assert kubeconfig(root, *args, "--output", str(output)) == 2
    err = capsys.readouterr().err
    assert said in err and "nothing was changed" in err and "Traceback" not in err
    assert cluster.calls() == [] and not output.exists()


def test_a_site_without_a_cluster_is_refused(root, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert not (root / "build" / "lab" / "artifacts" / "kubeconfig").exists()
    assert kubeconfig(root, "--tenant", "research", "--user", "alice", "--output", str(tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert "not issued: the site has no cluster yet" in err and "deploy the kubernetes stage" in err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the request


def test_the_signing_request_names_the_user_only_with_a_p256_key_and_no_ca():
    key = tenant_credentials.private_key()
    request = x509.load_pem_x509_csr(signing_request("alice", key))
    assert request.is_signature_valid
    assert request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    # no group: the tenant RoleBinding binds users only, so an O would grant nothing
    assert request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME) == []
    assert len(request.subject) == 1
    public = request.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert (public.curve.name, public.key_size) == ("secp256r1", 256)
    assert list(request.extensions) == []  # no BasicConstraints, so no CA: the signer decides the rest


def test_each_request_gets_its_own_name():
    names = {tenant_credentials.request_name("research", "Alice@Example.com") for _ in range(50)}
    assert len(names) == 50
    assert all(name.startswith("rackform-research-alice-example-com-") for name in names)
    assert safe_name("../../etc") == "etc"


# ---------------------------------------------------------------- issuing


def issued_for(path: Path) -> tuple[dict, x509.Certificate, ec.EllipticCurvePrivateKey]:
    config = yaml.safe_load(path.read_text())
    user = config["users"][0]["user"]
    certificate = x509.load_pem_x509_certificate(base64.b64decode(user["client-certificate-data"]))
    key = serialization.load_pem_private_key(base64.b64decode(user["client-key-data"]), None)
    return config, certificate, key


def test_alice_gets_a_kubeconfig_of_her_own(root, cluster, capsys):
    assert kubeconfig(root, "--tenant", "research", "--user", "alice", "--hours", "2") == 0
    out, err = capsys.readouterr()
    path = root / "build" / "lab" / "artifacts" / "kubeconfig-research-alice"
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        config, certificate, key = issued_for(path)
    finally:
        path.unlink(missing_ok=True)

    # the admin's cluster entry, exactly
    admin = yaml.safe_load(cluster.admin_kubeconfig.read_text())
    assert config["clusters"] == admin["clusters"]
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    assert context == {"cluster": "lab", "user": config["users"][0]["name"], "namespace": "research"}
    assert "kubernetes-admin" not in path.name and "QURNSU4" not in json.dumps(config)  # nothing of the admin's

    # the user's certificate, from the cluster's CA, for the key beside it
    certificate.verify_directly_issued_by(cluster.ca)
    assert certificate.subject.rfc4514_string() == "CN=alice"
    assert certificate.public_key().public_numbers() == key.public_key().public_numbers()
    lifetime = certificate.not_valid_after_utc - datetime.now(timezone.utc)
    assert timedelta(hours=1, minutes=58) < lifetime <= timedelta(hours=2)

    # what the command said: where, who, which tenant, until when; the key nowhere
    assert f"wrote {path}" in out and "user alice" in out and "tenant research" in out
    assert f"valid until {certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC" in out
    key_body = base64.b64decode(config["users"][0]["user"]["client-key-data"]).decode().splitlines()[1]
    assert key_body not in out + err + (cluster.state / "calls.jsonl").read_text()


def test_the_kubectl_calls_create_approve_read_and_delete_one_csr(root, cluster, tmp_path):
    output = tmp_path / "alice.kubeconfig"
    assert kubeconfig(root, "--tenant", "research", "--user", "alice", "--output", str(output)) == 0
    calls = cluster.calls()
    assert {tuple(call["argv"][:2]) for call in calls} == {("--kubeconfig", str(cluster.admin_kubeconfig))}
    commands = cluster.commands()
    name = commands[1][2]
    assert commands[0] == ["create", "-f", "-"]
    assert commands[1] == ["certificate", "approve", name]
    assert commands[2] == ["get", "csr", name, "-o", "json"]
    assert commands[-1] == ["delete", "csr", name, "--ignore-not-found"]
    assert name.startswith("rackform-research-alice-")

    manifest = json.loads(calls[0]["stdin"])
    assert manifest["apiVersion"] == "certificates.k8s.io/v1" and manifest["kind"] == "CertificateSigningRequest"
    assert manifest["metadata"]["name"] == name
    spec = manifest["spec"]
    assert (spec["signerName"], spec["expirationSeconds"], spec["usages"]) == (SIGNER, 8 * 3600, ["client auth"])
    request = x509.load_pem_x509_csr(base64.b64decode(spec["request"]))
    assert request.subject.rfc4514_string() == "CN=alice"
    _config, certificate, _key = issued_for(output)
    assert certificate.public_key().public_numbers() == request.public_key().public_numbers()
    assert ExtendedKeyUsageOID.CLIENT_AUTH in certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value

    # kubectl runs in the allowed environment: a secret of ours never reaches it
    assert all(SECRET_VARIABLE not in call["env"] for call in calls)
    assert cluster.csr_objects() == []


def test_a_signer_that_never_answers_times_out_clearly_and_the_csr_is_deleted(root, cluster, tmp_path, capsys,
                                                                                monkeypatch):
    cluster.answer("never")
    monkeypatch.setattr(tenant_credentials, "CERTIFICATE_WAIT_S", 0.2)
    output = tmp_path / "out"
    assert kubeconfig(root, "--tenant", "research", "--user", "bob", "--output", str(output)) == 1
    err = capsys.readouterr().err
    assert "not issued" in err and "approved, but no certificate within 0.2 s" in err
    assert cluster.commands()[-1][:2] == ["delete", "csr"] and cluster.csr_objects() == []
    assert not output.exists() and list(tmp_path.glob(".out*")) == []


def test_a_denied_request_is_reported_and_deleted(root, cluster, tmp_path, capsys):
    cluster.answer("deny")
    assert kubeconfig(root, "--tenant", "inference", "--user", "carol", "--output", str(tmp_path / "out")) == 1
    assert "denied: not today" in capsys.readouterr().err
    assert cluster.commands()[-1][:2] == ["delete", "csr"] and cluster.csr_objects() == []
    assert not (tmp_path / "out").exists()


def test_a_refused_create_says_so_and_deletes_nothing(root, cluster, tmp_path, capsys):
    cluster.answer("refuse-create")
    assert kubeconfig(root, "--tenant", "inference", "--user", "carol", "--output", str(tmp_path / "out")) == 1
    assert "creating CSR rackform-inference-carol-" in capsys.readouterr().err
    assert [command[0] for command in cluster.commands()] == ["create"]


# ---------------------------------------------------------------- the file


def test_the_file_is_0600_from_its_first_byte_whatever_the_umask(tmp_path, monkeypatch):
    opened = []
    real_open, real_replace = os.open, os.replace

    def recording_open(path, flags, mode=0o777, *args, **kwargs):
        opened.append((Path(path), flags, mode))
        return real_open(path, flags, mode, *args, **kwargs)

    def checking_replace(source, target):
        assert stat.S_IMODE(os.stat(source).st_mode) == 0o600
        return real_replace(source, target)

    monkeypatch.setattr(tenant_credentials.os, "open", recording_open)
    monkeypatch.setattr(tenant_credentials.os, "replace", checking_replace)
    target = tmp_path / "deep" / "kubeconfig-research-alice"
    target.parent.mkdir()
    target.write_text("an older one")
    target.chmod(0o644)
    previous = os.umask(0)
    try:
        tenant_credentials.write_private(target, "secret: yes\n")
    finally:
        os.umask(previous)
    assert target.read_text() == "secret: yes\n" and stat.S_IMODE(target.stat().st_mode) == 0o600
    [(path, flags, mode)] = opened
    assert path.parent == target.parent and path != target
    assert mode == 0o600 and flags & os.O_CREAT and flags & os.O_EXCL
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]


def test_a_ca_file_in_the_admin_kubeconfig_is_embedded(tmp_path):
    (tmp_path / "ca.crt").write_bytes(b"CA PEM")
    admin = tmp_path / "admin.conf"
    admin.write_text(yaml.safe_dump({"clusters": [{"name": "c", "cluster": {"server": SERVER,
                                                                             "certificate-authority": "ca.crt"}}]}))
    found = tenant_credentials.admin_cluster(admin)
    assert found.name == "c"
    assert found.cluster == {"server": SERVER, "certificate-authority-data": base64.b64encode(b"CA PEM").decode()}
