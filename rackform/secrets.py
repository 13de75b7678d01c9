"""Per-site secrets: one ansible-vault file per site, outside the repo and the project.

    <secrets root>/<site>/          0700
        bmc_vault.yml               0600, ansible-vault (AES-256): rackform_bmc_credentials:
                                      {host: {user, password, previous: [...], factory: [{user, password}]}}
                                    and, for a site with Kubernetes, rackform_kube_encryption_keys:
                                      [{name, secret}, ...] (the API servers' keys for Secrets at rest)
        vault-password              0600, random, made on first use (unless one is given)
        .lock                       serialises writers (flock)

The secrets root is $RACKFORM_SECRETS_DIR, else $XDG_STATE_HOME/rackform/secrets, else
~/.local/state/rackform/secrets; a root inside a git work tree is refused, so generated
passwords cannot be committed by accident. $RACKFORM_VAULT_PASSWORD_FILE names another
vault password file (or an executable that prints it, as Ansible allows: a password
manager's CLI); it must not be readable by group or others.

Both front doors open the same vault. The Pulumi stack gives its rackform:vaultPassword
as $RACKFORM_VAULT_PASSWORD_FILE (a file that lasts one operation) and keeps no copy, so
a vault the stack made has no `vault-password` file: a CLI command then stops and says
how to give it the same password (in `vault-password`, or $RACKFORM_VAULT_PASSWORD_FILE);
it never makes a new password for a vault that exists.

Passwords are generated here, before Ansible runs (20 letters and digits: IPMI 2.0's
longest, and nothing YAML or Jinja would read as syntax). The provision playbook reads
the vault through `vars_files` (once per run, however many servers), decrypted with
ANSIBLE_VAULT_PASSWORD_FILE; `runner_envvars` gives both variables for ansible-runner.
Rotation moves the current password to `previous` (the module logs in with it, then
sets the new one); `forget_previous` drops them once every BMC has the new one.

The cluster's encryption keys (docs/kubernetes.md, "Secrets encrypted at rest") are an
ordered list: the first encrypts what the API servers write, the others only decrypt.
Each is 32 random bytes, base64 (secretbox's key). `rotate_encryption_key` puts a new key
first and keeps the old ones; the kubernetes stage rolls it out and rewrites every Secret
with it; `forget_old_encryption_keys` then keeps the first alone. The kubernetes play reads
them from this same file, as the provision play reads the BMC passwords.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import secrets
import stat
import string
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import yaml

ENV_SECRETS_DIR = "RACKFORM_SECRETS_DIR"
ENV_VAULT_PASSWORD_FILE = "RACKFORM_VAULT_PASSWORD_FILE"
ENV_BMC_VAULT = "RACKFORM_BMC_VAULT"
"""Read by the emitted provision playbook (vars_files)."""
ENV_ANSIBLE_VAULT_PASSWORD_FILE = "ANSIBLE_VAULT_PASSWORD_FILE"

VAULT_FILE = "bmc_vault.yml"
VAULT_PASSWORD_FILE = "vault-password"
LOCK_FILE = ".lock"
VAULT_VARIABLE = "rackform_bmc_credentials"
"""The BMC passwords' variable (the provision playbook looks a server up in it)."""
ENCRYPTION_KEYS_VARIABLE = "rackform_kube_encryption_keys"
"""The API servers' encryption keys for Secrets, first one used for writing (the kubeadm role reads it)."""
ENCRYPTION_KEY_BYTES = 32
"""secretbox's key length (XSalsa20-Poly1305)."""

ADMIN_USER = "rackform"
"""The site admin account rackform creates on every BMC (IPMI allows 16 bytes)."""
DEFAULT_FACTORY_LOGINS = (("ADMIN", "ADMIN"),)
"""The factory login a new entry gets (Supermicro's and the lab's): published, but still a
credential, so it lives here and in the vault, never in the rendered project. A BMC shipped
with its own password (on a label) gets it with `ansible-vault edit` of its entry."""
PASSWORD_LENGTH = 20
"""IPMI 2.0's longest password."""
PASSWORD_ALPHABET = string.ascii_letters + string.digits
VAULT_PASSWORD_BYTES = 32


class SecretsError(Exception):
    """The site's secrets cannot be kept safely or read (with what to do about it)."""


@dataclass(frozen=True, slots=True)
class BmcCredential:
    """One BMC's site admin login; the password never shows in repr or logs."""

    user: str
    password: str = field(repr=False)
    previous: tuple[str, ...] = field(default=(), repr=False)
    """Earlier passwords, tried after `password` until every BMC has the new one."""
    factory: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """This unit's own factory (user, password), for BMCs shipped with a unique one."""

    def to_yaml(self) -> dict:
        entry: dict = {"user": self.user, "password": self.password}
        if self.previous:
            entry["previous"] = list(self.previous)
        if self.factory:
            entry["factory"] = [{"user": user, "password": password} for user, password in self.factory]
        return entry

    @classmethod
    def from_yaml(cls, entry: dict) -> BmcCredential:
        return cls(
            user=str(entry["user"]),
            password=str(entry["password"]),
            previous=tuple(str(p) for p in entry.get("previous") or ()),
            factory=tuple((str(f["user"]), str(f["password"])) for f in entry.get("factory") or ()),
        )


@dataclass(frozen=True, slots=True)
class EncryptionKey:
    """One key of the API servers' EncryptionConfiguration; the secret never shows in repr or logs."""

    name: str
    secret: str = field(repr=False)
    """ENCRYPTION_KEY_BYTES random bytes, base64."""

    def to_yaml(self) -> dict:
        return {"name": self.name, "secret": self.secret}

    @classmethod
    def from_yaml(cls, entry: dict) -> EncryptionKey:
        return cls(name=str(entry["name"]), secret=str(entry["secret"]))


def generate_encryption_key(taken: Iterable[str] = (), now: datetime | None = None) -> EncryptionKey:
    """A new random key, named after when it was made (`key-20261128t103000z`), unique among `taken`."""
    stamp = (now or datetime.now(UTC)).strftime("key-%Y%m%dt%H%M%Sz")
    taken = set(taken)
    name = next(candidate for candidate in (stamp, *(f"{stamp}-{n}" for n in range(2, 100)))
                if candidate not in taken)
    return EncryptionKey(name, base64.b64encode(secrets.token_bytes(ENCRYPTION_KEY_BYTES)).decode())


def generate_password(length: int = PASSWORD_LENGTH) -> str:
    return "".join(secrets.choice(PASSWORD_ALPHABET) for _ in range(length))


def secrets_root(environ: dict[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    if environ.get(ENV_SECRETS_DIR):
        return Path(environ[ENV_SECRETS_DIR]).expanduser()
    state_home = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home).expanduser() / "rackform" / "secrets"


def git_work_tree(path: Path) -> Path | None:
    """The git work tree `path` lies in (a folder with a `.git`), or None."""
    for folder in (path.resolve(), *path.resolve().parents):
        if (folder / ".git").exists():
            return folder
    return None


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)


def _write_private(path: Path, data: bytes) -> None:
    """Write atomically (a 0600 temporary file renamed over `path`): readers see old or new, never half."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        temporary.replace(path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _check_private_file(path: Path) -> None:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretsError(f"{path} is readable by others (mode {stat.S_IMODE(mode):04o}): chmod 600 it")


class SiteVault:
    """The secrets of one site: BMC logins, and the cluster's encryption keys."""

    def __init__(self, site_name: str, root: Path | None = None, environ: dict[str, str] | None = None):
        environ = os.environ if environ is None else environ
        self.site_name = site_name
        self.directory = (root or secrets_root(environ)) / site_name
        self.vault_file = self.directory / VAULT_FILE
        given = environ.get(ENV_VAULT_PASSWORD_FILE)
        self.password_file = Path(given).expanduser() if given else self.directory / VAULT_PASSWORD_FILE
        self.own_password_file = not given
        self._lock_file = self.directory / LOCK_FILE
        tree = git_work_tree(self.directory)
        if tree is not None:
            raise SecretsError(f"{self.directory} is inside the git work tree {tree}: BMC passwords must never be "
                               f"committed; set {ENV_SECRETS_DIR} to a folder outside any repository")

    # --- the vault password ----------------------------------------------------------------------

    def _vault_lib(self, create: bool):
        from ansible.parsing.dataloader import DataLoader
        from ansible.parsing.vault import VaultLib, get_file_vault_secret

        if not self.password_file.exists():
            if not self.own_password_file:
                raise SecretsError(f"no vault password file at {self.password_file} (named by "
                                   f"{ENV_VAULT_PASSWORD_FILE}): no such file")
            if not create:
                raise SecretsError(self._missing_password())
            _private_dir(self.directory)
            _write_private(self.password_file, secrets.token_urlsafe(VAULT_PASSWORD_BYTES).encode() + b"\n")
        _check_private_file(self.password_file)
        secret = get_file_vault_secret(filename=str(self.password_file), loader=DataLoader())
        secret.load()
        return VaultLib([("default", secret)])

    def _missing_password(self) -> str:
        """What to do when the vault exists but its password is not where rackform looks. The usual
        cause: the Pulumi stack made the vault with its rackform:vaultPassword, which it keeps in
        the stack's encrypted config, never on disk."""
        return (f"no vault password file at {self.password_file} for {self.vault_file}, which exists. "
                f"The vault was made with a password given elsewhere, as the Pulumi stack's rackform:vaultPassword "
                f"is. Give rackform the same password, either where it looks: "
                f"`(umask 077; pulumi config get rackform:vaultPassword -s STACK > {self.password_file})` "
                f"(the stack of site {self.site_name}; or the password you gave), or by setting "
                f"{ENV_VAULT_PASSWORD_FILE} to a file (mode 0600) or an executable that prints it")

    def _wrong_password(self, error: Exception) -> str:
        given = (f"{self.password_file} ({ENV_VAULT_PASSWORD_FILE}, or the Pulumi stack's rackform:vaultPassword)"
                 if not self.own_password_file else str(self.password_file))
        own = self.directory / VAULT_PASSWORD_FILE
        hint = (f"; the CLI's own password is in {own}: give the stack the same one "
                f"(`pulumi config set --secret rackform:vaultPassword < {own}`) or unset "
                f"{ENV_VAULT_PASSWORD_FILE}" if not self.own_password_file and own.exists() else "")
        return f"cannot decrypt {self.vault_file} with the password in {given}: {error}{hint}"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        _private_dir(self.directory)
        with os.fdopen(os.open(self._lock_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    # --- reading and writing ---------------------------------------------------------------------

    def exists(self) -> bool:
        return self.vault_file.exists()

    def _document(self) -> dict:
        """The decrypted vault (empty when it does not exist yet)."""
        if not self.vault_file.exists():
            return {}
        _check_private_file(self.vault_file)
        try:
            plaintext = self._vault_lib(create=False).decrypt(self.vault_file.read_bytes())
        except SecretsError:
            raise
        except Exception as error:  # AnsibleError for a wrong password or a damaged file
            raise SecretsError(self._wrong_password(error)) from None
        return yaml.safe_load(plaintext) or {}

    @staticmethod
    def _credentials(document: dict) -> dict[str, BmcCredential]:
        entries = document.get(VAULT_VARIABLE) or {}
        return {host: BmcCredential.from_yaml(entry) for host, entry in entries.items()}

    @staticmethod
    def _keys(document: dict) -> list[EncryptionKey]:
        return [EncryptionKey.from_yaml(entry) for entry in document.get(ENCRYPTION_KEYS_VARIABLE) or ()]

    def load(self) -> dict[str, BmcCredential]:
        """Every host's credential (empty when the vault does not exist yet)."""
        return self._credentials(self._document())

    def encryption_keys(self) -> list[EncryptionKey]:
        """The cluster's encryption keys, the one used for writing first (empty: none made yet)."""
        return self._keys(self._document())

    def _save(self, credentials: dict[str, BmcCredential], keys: list[EncryptionKey]) -> None:
        document: dict = {VAULT_VARIABLE: {host: credentials[host].to_yaml() for host in sorted(credentials)}}
        if keys:
            document[ENCRYPTION_KEYS_VARIABLE] = [key.to_yaml() for key in keys]  # in order: the first writes
        plaintext = yaml.safe_dump(document, sort_keys=True, default_flow_style=False)
        header = f"# Secrets of site {self.site_name}, written by rackform.secrets.\n"
        _write_private(self.vault_file, self._vault_lib(create=True).encrypt(header + plaintext))

    def ensure(self, hosts: Iterable[str], user: str = ADMIN_USER,
               factory: tuple[tuple[str, str], ...] = DEFAULT_FACTORY_LOGINS) -> list[str]:
        """Give every host without a credential a new random password (and the factory login
        to reach its BMC the first time); returns those hosts."""
        with self._locked():
            document = self._document()
            credentials = self._credentials(document)
            added = sorted(set(hosts) - set(credentials))
            if added or not self.vault_file.exists():
                for host in added:
                    credentials[host] = BmcCredential(user=user, password=generate_password(), factory=factory)
                self._save(credentials, self._keys(document))
        return added

    def rotate(self, hosts: Iterable[str]) -> list[str]:
        """New passwords for these hosts; the current ones become `previous` (tried next run)."""
        with self._locked():
            document = self._document()
            credentials = self._credentials(document)
            wanted = sorted(set(hosts))
            unknown = [host for host in wanted if host not in credentials]
            if unknown:
                raise SecretsError(f"no BMC credentials to rotate for {', '.join(unknown)} (site {self.site_name})")
            for host in wanted:
                old = credentials[host]
                credentials[host] = BmcCredential(old.user, generate_password(), (old.password, *old.previous),
                                                  old.factory)
            self._save(credentials, self._keys(document))
        return wanted

    def forget_previous(self, hosts: Iterable[str]) -> list[str]:
        """Drop the previous passwords of hosts whose BMCs have the current one; returns those changed."""
        with self._locked():
            document = self._document()
            credentials = self._credentials(document)
            changed = sorted(host for host in set(hosts) if host in credentials and credentials[host].previous)
            for host in changed:
                old = credentials[host]
                credentials[host] = BmcCredential(old.user, old.password, (), old.factory)
            if changed:
                self._save(credentials, self._keys(document))
        return changed

    # --- the cluster's encryption keys -----------------------------------------------------------

    def ensure_encryption_key(self) -> EncryptionKey | None:
        """Make the first encryption key where there is none; returns it (None: one was there)."""
        with self._locked():
            document = self._document()
            keys = self._keys(document)
            if keys:
                return None
            made = generate_encryption_key()
            self._save(self._credentials(document), [made])
        return made

    def rotate_encryption_key(self) -> EncryptionKey:
        """A new key first (the API servers write with it once the kubernetes stage ran); the
        others stay, after it, so that what they encrypted can still be read."""
        with self._locked():
            document = self._document()
            keys = self._keys(document)
            made = generate_encryption_key(key.name for key in keys)
            self._save(self._credentials(document), [made, *keys])
        return made

    def forget_old_encryption_keys(self) -> list[str]:
        """Keep the first key alone; returns the names dropped. Only once the kubernetes stage
        has run with the first key (it rewrote every Secret with it): the stage refuses a vault
        that lacks the key the API servers write with."""
        with self._locked():
            document = self._document()
            keys = self._keys(document)
            dropped = [key.name for key in keys[1:]]
            if dropped:
                self._save(self._credentials(document), keys[:1])
        return dropped

    def runner_envvars(self) -> dict[str, str]:
        """What ansible-runner (or a shell) needs to run the provision playbook."""
        return {ENV_BMC_VAULT: str(self.vault_file), ENV_ANSIBLE_VAULT_PASSWORD_FILE: str(self.password_file)}

    # --- the site's other vault files (the site mirror's keys: rackform.mirror.site_keys) --------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the site's secrets lock (every writer of the folder takes it)."""
        with self._locked():
            yield

    def read_vault_file(self, name: str) -> dict:
        """Another vault file of the site's folder (`name`, e.g. mirror_vault.yml), decrypted with
        the same password; empty when it does not exist yet."""
        path = self.directory / name
        if not path.exists():
            return {}
        _check_private_file(path)
        try:
            plaintext = self._vault_lib(create=False).decrypt(path.read_bytes())
        except SecretsError:
            raise
        except Exception as error:  # AnsibleError for a wrong password or a damaged file
            raise SecretsError(self._wrong_password(error).replace(str(self.vault_file), str(path), 1)) from None
        return yaml.safe_load(plaintext) or {}

    def write_vault_file(self, name: str, document: dict, header: str) -> None:
        """Encrypt `document` into the vault file `name` of the site's folder (0600, written
        atomically); the caller holds `locked()`."""
        _private_dir(self.directory)
        plaintext = header + yaml.safe_dump(document, sort_keys=True, default_flow_style=False)
        _write_private(self.directory / name, self._vault_lib(create=True).encrypt(plaintext))


def bmc_hosts(site) -> list[str]:
    """Hosts of a `rackform.model.site.Site` that have a BMC."""
    return [host.name for host in site.hosts.values() if host.bmc_address is not None]


def ensure_site_vault(site, root: Path | None = None, environ: dict[str, str] | None = None) -> SiteVault:
    """The site's vault, with a credential for every host that has a BMC and, for a site with
    Kubernetes, an encryption key for its Secrets (`environ`: as SiteVault)."""
    vault = SiteVault(site.name, root, environ)
    vault.ensure(bmc_hosts(site))
    if getattr(site, "kubernetes", None) is not None:
        vault.ensure_encryption_key()
    return vault


def bmc_credentials(site_name: str, repo_root: Path | None = None):
    """A lookup `node -> BmcCredential` over the site's vault, decrypted once (for fleet tools).

    `repo_root` is accepted for callers that pass the site's repository; the vault never
    lives there. A node without credentials raises SecretsError naming the vault. A BMC
    may use only the first 16 bytes of the password (IPMI 1.5-era firmware, ipmi_sim):
    log in with the whole password first, then with its first 16 bytes.
    """
    vault = SiteVault(site_name)
    credentials = vault.load()

    def lookup(node: str) -> BmcCredential:
        try:
            return credentials[node]
        except KeyError:
            raise SecretsError(f"no BMC credentials for {node} in {vault.vault_file}: run `rackform secrets "
                               f"{site_name}` (and provision) first") from None

    return lookup
