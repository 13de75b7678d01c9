"""The site mirror's apt repository, signed: one OpenPGP key per site, its Release signed.

apt trusts a repository only when its Release comes signed, as `InRelease` (the Release with
its signature around it, read first) or `Release` with `Release.gpg` beside it, by a key the
source names (`signed-by=` a keyring file). With the signature, `Release` carries the SHA256
of `Packages` and `Packages.gz`, those carry each .deb's SHA256, so one signature covers every
byte a node installs.

Every operation runs the distribution's `gpg` in a throwaway home folder (made 0700, removed
with its agent afterwards): nothing is kept in any user's keyring and no passphrase is
asked for. The private key lives only in the site's vault (`rackform.mirror.site_keys`) and,
while a Release is signed, in that folder.

- `generate_key`: an Ed25519 signing key (gpg's `future-default`), no expiry, no passphrase
  (the vault is its protection); armored private and public halves and the fingerprint.
- `sign_release`: `InRelease` (clear-signed) and `Release.gpg` (detached, armored) for a
  Release, SHA512 as the digest.
- `verify_release`: `gpgv`, as apt runs it, against the public key: what a node will accept.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rackform.installed_tools import find_tool
from rackform.mirror import MirrorError

SIGNED_FILES = ("InRelease", "Release.gpg")
"""What signing a Release adds beside it; apt reads InRelease first."""
GPG_TIMEOUT_S = 120


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A site's apt signing key; the private half never shows in repr or logs."""

    fingerprint: str
    public: str
    """Armored public key: what the nodes' keyring file holds."""
    private: str = field(repr=False)
    """Armored secret key, no passphrase: kept in the site's vault only."""


def _gpg(home: Path, *args: str, stdin: str | bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    gpg = find_tool("gpg")
    if gpg is None:
        raise MirrorError("gpg: not installed (Debian package gnupg): the site mirror's apt repository is signed "
                          "with it on the controller")
    data = stdin.encode() if isinstance(stdin, str) else stdin
    try:
        done = subprocess.run([gpg, "--homedir", str(home), "--batch", "--no-tty", "--pinentry-mode", "loopback",
                               "--passphrase", "", *args], input=data, capture_output=True, timeout=GPG_TIMEOUT_S,
                              env=_environment(home))
    except subprocess.TimeoutExpired as error:
        raise MirrorError(f"gpg {' '.join(args[:2])} did not finish within {GPG_TIMEOUT_S} s") from error
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise MirrorError(f"gpg {' '.join(args[:2])} failed (exit {done.returncode}): {' / '.join(detail)}")
    return done


def _environment(home: Path) -> dict[str, str]:
    """gpg's environment: its home and the C locale, nothing of the caller's (no agent or
    keyring of a user's own session is ever reached)."""
    return {"PATH": os.environ.get("PATH", os.defpath), "GNUPGHOME": str(home), "LC_ALL": "C"}


@contextlib.contextmanager
def _gnupg_home() -> Iterator[Path]:
    """A home folder for one gpg session: 0700, short (the agent's socket path has a length
    limit), removed with its agent afterwards."""
    home = Path(tempfile.mkdtemp(prefix="rf-gpg-"))
    home.chmod(0o700)
    try:
        yield home
    finally:
        gpgconf = find_tool("gpgconf")
        if gpgconf is not None:  # the agent gpg started for this home, and only that one
            subprocess.run([gpgconf, "--homedir", str(home), "--kill", "all"], capture_output=True,
                           timeout=GPG_TIMEOUT_S, check=False, env=_environment(home))
        shutil.rmtree(home, ignore_errors=True)


def generate_key(site_name: str) -> SigningKey:
    """A new signing key for the site mirror of `site_name`."""
    user_id = f"rackform site mirror {site_name} <mirror@{site_name}.rackform.invalid>"
    with _gnupg_home() as home:
        _gpg(home, "--quick-generate-key", user_id, "future-default", "sign", "never")
        listing = _gpg(home, "--with-colons", "--list-secret-keys").stdout.decode()
        fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        public = _gpg(home, "--armor", "--export", fingerprint).stdout.decode()
        private = _gpg(home, "--armor", "--export-secret-keys", fingerprint).stdout.decode()
    return SigningKey(fingerprint, public, private)


def sign_release(release: Path, key: SigningKey, out_dir: Path) -> list[Path]:
    """Write InRelease and Release.gpg for `release` into `out_dir`; return them. Each is written
    beside its final name and renamed over it, so a reader sees an old file or a new one."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with _gnupg_home() as home:
        _gpg(home, "--import", stdin=key.private)
        for name, mode in (("InRelease", "--clearsign"), ("Release.gpg", "--detach-sign")):
            temporary = out_dir / f".{name}.{os.getpid()}.tmp"
            _gpg(home, "--yes", "--local-user", key.fingerprint, "--digest-algo", "SHA512", "--armor", mode,
                 "--output", str(temporary), str(release))
            temporary.chmod(0o644)
            temporary.replace(out_dir / name)
            written.append(out_dir / name)
    return written


def verify_release(release: Path, signed_dir: Path, public_key: str) -> list[str]:
    """What is wrong with the signatures in `signed_dir` for `release`, checked by gpgv (as apt
    checks them) against `public_key` alone; empty when both verify and InRelease holds exactly
    `release`."""
    gpgv = find_tool("gpgv")
    if gpgv is None:
        raise MirrorError("gpgv: not installed (Debian package gpgv)")
    problems = []
    with _gnupg_home() as home:
        keyring = home / "mirror.gpg"
        keyring.write_bytes(_gpg(home, "--dearmor", stdin=public_key).stdout)
        signed_text = home / "InRelease.text"
        checks = {"InRelease": ["--output", str(signed_text), str(signed_dir / "InRelease")],
                  "Release.gpg": [str(signed_dir / "Release.gpg"), str(release)]}
        for name, arguments in checks.items():
            if not (signed_dir / name).is_file():
                problems.append(f"{signed_dir / name}: missing")
                continue
            done = subprocess.run([gpgv, "--keyring", str(keyring), *arguments], capture_output=True,
                                  timeout=GPG_TIMEOUT_S, check=False, env=_environment(home))
            if done.returncode != 0:
                said = done.stderr.decode(errors="replace").strip().splitlines()
                problems.append(f"{signed_dir / name}: not a good signature by the key ({said[-1] if said else ''})")
        if not problems and signed_text.read_bytes() != release.read_bytes():
            problems.append(f"{signed_dir / 'InRelease'}: signs another Release than {release}")
    return problems
