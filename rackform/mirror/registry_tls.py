"""The site mirror's registry over TLS: a certificate authority of the site's own, the registry's
certificate it signs, and the credential that pushes.

- `make_ca`: an EC P-256 key and a self-signed CA certificate (`CA:TRUE, pathlen:0`, key usage
  keyCertSign and cRLSign only), ten years. Nodes trust it for the registry alone (containerd's
  `certs.d/<registry>/ca.crt`) and in their system store, so anything on a node that speaks TLS
  to the mirror checks the same chain.
- `make_server_cert`: an EC P-256 key and a certificate for the mirror's address (an IP
  subjectAltName; the mirror host's name as a DNS one), serverAuth only, 825 days: what TLS
  clients accept as the longest life of a server certificate.
- `server_cert_current`: whether a kept certificate still names this address and these names,
  is signed by this CA and has more than RENEW_BEFORE left; otherwise a new one is made.
- `htpasswd_line`: `user:$6$...` (SHA-512 crypt, `openssl passwd -6`, the password on stdin,
  never on a command line), which nginx's auth_basic reads through the C library's crypt().

Pure functions over PEM text: `rackform.mirror.site_keys` keeps the results in the site's vault.
"""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from rackform.installed_tools import find_tool
from rackform.mirror import MirrorError
from rackform.process_environment import tool_environment

CA_LIFETIME = datetime.timedelta(days=3650)
SERVER_LIFETIME = datetime.timedelta(days=825)
RENEW_BEFORE = datetime.timedelta(days=30)
"""A server certificate with less left than this is made again on the next run."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its private key, PEM; the key never shows in repr or logs."""

    cert: str
    key: str = field(repr=False)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _pem_cert(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def make_ca(site_name: str, now: datetime.datetime | None = None) -> KeyPair:
    """The site mirror's certificate authority."""
    now = now or _now()
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "rackform"),
                      x509.NameAttribute(NameOID.COMMON_NAME, f"rackform site mirror CA ({site_name})")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + CA_LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return KeyPair(_pem_cert(cert), _pem_key(key))


def _alternative_names(address: str, names: tuple[str, ...]) -> list[x509.GeneralName]:
    return [x509.IPAddress(ipaddress.ip_address(address)), *(x509.DNSName(name) for name in names)]


def make_server_cert(ca: KeyPair, address: str, names: tuple[str, ...] = (),
                     now: datetime.datetime | None = None) -> KeyPair:
    """The registry's certificate for `address` (and DNS `names`), signed by `ca`."""
    now = now or _now()
    ca_key = serialization.load_pem_private_key(ca.key.encode(), password=None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert.encode())
    key = _new_key()
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + SERVER_LIFETIME)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(_alternative_names(address, names)), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return KeyPair(_pem_cert(cert), _pem_key(key))


def server_cert_current(server: KeyPair, ca: KeyPair, address: str, names: tuple[str, ...] = (),
                        now: datetime.datetime | None = None) -> bool:
    """Whether `server` still serves: signed by `ca`, naming exactly this address and these
    names, with more than RENEW_BEFORE left."""
    now = now or _now()
    try:
        cert = x509.load_pem_x509_certificate(server.cert.encode())
        ca_cert = x509.load_pem_x509_certificate(ca.cert.encode())
        cert.verify_directly_issued_by(ca_cert)
        named = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, x509.ExtensionNotFound, InvalidSignature):
        return False
    return (set(named) == set(_alternative_names(address, names))
            and cert.not_valid_after_utc - now > RENEW_BEFORE)


def htpasswd_line(user: str, password: str) -> str:
    """`user:<SHA-512 crypt of password>` for nginx's auth_basic_user_file."""
    openssl = find_tool("openssl")
    if openssl is None:
        raise MirrorError("openssl: not installed (Debian package openssl): it hashes the registry's push password")
    done = subprocess.run([openssl, "passwd", "-6", "-stdin"], input=password + "\n", capture_output=True, text=True,
                          timeout=60, env=tool_environment("openssl"))
    if done.returncode != 0 or not done.stdout.startswith("$6$"):
        raise MirrorError(f"openssl passwd failed (exit {done.returncode}): {done.stderr.strip()}")
    return f"{user}:{done.stdout.strip()}"
