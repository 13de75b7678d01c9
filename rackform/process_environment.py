"""The environment of every process rackform starts: an allow-list per tool, never the whole of ours.

A person runs rackform with everything their shell holds: cloud keys, tokens, the passwords of
other systems. None of that is for kubectl, helm, pytest, ssh or a Go build, and a tool that
records or prints its environment (ansible-runner records a run's; a failing helper may print
its own) would spread it. So a started process gets, from this process's environment:

- the BASE names (where programs and the user's files are, who runs them, language and time
  zone, TLS trust, proxies) and LC_*;
- the names its tool's profile adds (TOOLS: KUBECONFIG for kubectl and helm, HELM_* for helm,
  the GO* settings for go, ANSIBLE_* paths for ansible, PULUMI_* for the engine ...). A name a
  profile takes by prefix is dropped when it looks like a secret (SECRET_WORDS), unless it
  names a file, folder or socket; a secret a tool is meant to get is listed by name;
- a proxy whose URL carries a password only where the profile fetches through it itself;

then what the caller gives (`extra`: set deliberately, a secret such as ipmitool's
IPMI_PASSWORD included), and PATH with the folder rackform is installed in first
(rackform.installed_tools). A tool not in TOOLS gets the BASE only. A caller that wants even
less than the BASE for a tool spells its environment out name by name instead. docs/security.md
explains each choice.

Standard library only (and installed_tools): every layer starts processes, so any layer may
import this. tests/unit/test_process_environment.py fails when a process start in rackform/
bypasses `tool_environment`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from rackform.installed_tools import search_path

PROXY_NAMES = ("http_proxy", "https_proxy", "no_proxy", "all_proxy",
               "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")

BASE = frozenset({
    # where programs and the user's files are, and who runs them
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR",
    # language, time zone, the terminal (ipmitool's serial console draws on it)
    "LANG", "LANGUAGE", "TZ", "TERM",
    # a site's own certificate authority, for tools that speak TLS (OpenSSL and Go read these)
    "SSL_CERT_FILE", "SSL_CERT_DIR",
    *PROXY_NAMES,
})
"""What every started process gets where this process has it (with LC_*)."""
BASE_PREFIXES = ("LC_",)

SECRET_WORDS = re.compile(r"PASS|TOKEN|SECRET|CREDENTIAL|AUTH|API_?KEY|(^|_)KEY$|COOKIE|SESSION")
"""A name a profile takes by prefix but that looks like a secret stays here (PULUMI_ACCESS_TOKEN,
HELM_REPO_PASSWORD, RACKFORM_SWITCH_PASSWORD ...)."""
PATH_SUFFIXES = ("_FILE", "_DIR", "_PATH", "_SOCK", "_HOME")
"""... unless it names where something is (RACKFORM_VAULT_PASSWORD_FILE is a path, not a password)."""

_PYTHON = ("PYTHONPATH", "VIRTUAL_ENV")
_SSH_AGENT = ("SSH_AUTH_SOCK",)
_ANSIBLE = ("ANSIBLE_PRIVATE_KEY_FILE", "ANSIBLE_VAULT_PASSWORD_FILE", "RACKFORM_BMC_VAULT", "RACKFORM_SWITCH_USER",
            "ANSIBLE_LOCAL_TEMP", "ANSIBLE_REMOTE_TEMP", "ANSIBLE_NOCOLOR")
_KUBE = ("KUBECONFIG", "KUBECACHEDIR")
_XDG_FOLDERS = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR")
_GO = (
    # where Go keeps its modules, caches and settings, and which toolchain runs (`go help environment`)
    "GOROOT", "GOPATH", "GOBIN", "GOCACHE", "GOMODCACHE", "GOTMPDIR", "GOENV", "GOTOOLCHAIN", "GOWORK",
    "GOTELEMETRY", "GOTELEMETRYDIR", "GODEBUG", "GOEXPERIMENT", "GOFIPS140", "GO111MODULE", "GOFLAGS",
    # where modules come from (GOAUTH names a command that logs in, not a secret)
    "GOPROXY", "GONOPROXY", "GOPRIVATE", "GONOSUMDB", "GONOSUMCHECK", "GOSUMDB", "GOINSECURE", "GOVCS", "GOAUTH",
    # the target, and cgo's compiler
    "GOOS", "GOARCH", "GOAMD64", "GOARM", "GOARM64", "GO386", "GOPPC64", "GORISCV64", "GOMIPS", "GOMIPS64",
    "GOWASM", "CGO_ENABLED", "CGO_CFLAGS", "CGO_CPPFLAGS", "CGO_CXXFLAGS", "CGO_LDFLAGS", "CC", "CXX", "AR",
    "PKG_CONFIG", "XDG_CACHE_HOME", "XDG_CONFIG_HOME",
)


@dataclass(frozen=True, slots=True)
class ToolProfile:
    """What one tool gets on top of BASE, and why (docs/security.md shows the same)."""

    names: frozenset[str] = frozenset()
    """Passed by name, secret-looking or not: the tool is meant to get them."""
    prefixes: tuple[str, ...] = ()
    """Passed by prefix, less the names that look like secrets (SECRET_WORDS)."""
    refused_prefixes: tuple[str, ...] = ()
    """Never passed, though a prefix above takes them."""
    proxy_password: bool = False
    """A proxy URL with a password is passed: the tool fetches through that proxy itself."""
    why: str = ""


def _profile(*groups: tuple[str, ...] | frozenset[str], **options) -> ToolProfile:
    return ToolProfile(names=frozenset(name for group in groups for name in group), **options)


_HELM = dict(prefixes=("HELM_",), refused_prefixes=("HELM_KUBE", "HELM_NAMESPACE"))

TOOLS: dict[str, ToolProfile] = {
    "ansible": _profile(_PYTHON, _SSH_AGENT, _ANSIBLE, why=(
        "ansible-runner and ansible-playbook: the key, vault and switch-user paths rackform tells a person to "
        "export, the SSH agent; no ANSIBLE_CONFIG (the project's ansible.cfg decides), no password proxy "
        "(ansible-runner records a run's environment)")),
    "pytest": _profile(_PYTHON, _SSH_AGENT, _ANSIBLE, ("ANSIBLE_SSH_EXTRA_ARGS",), why=(
        "`rackform verify`'s testinfra checks: what ansible gets (testinfra logs in as Ansible does), and the "
        "user's extra ssh options (a jump host), which verify extends")),
    "ssh": _profile(_SSH_AGENT, why="the SSH agent holding the user's key"),
    "ssh-keyscan": _profile(why="reads public host keys: nothing more"),
    "ssh-keygen": _profile(why="writes a key pair: nothing more"),
    "kubectl": _profile(_KUBE, proxy_password=True,
                        why="the kubeconfig (rackform sets it itself where it knows the cluster), its cache"),
    "helm": _profile(_KUBE, _XDG_FOLDERS, **_HELM, proxy_password=True, why=(
        "the kubeconfig, helm's own HELM_* folders and settings, but never HELM_KUBE* or HELM_NAMESPACE, "
        "which would point helm at another cluster or namespace than the kubeconfig's")),
    "go": _profile(_GO, _SSH_AGENT, proxy_password=True, why=(
        "the Go toolchain's settings (module proxy, checksum database, caches, toolchain, target) and the SSH "
        "agent for modules fetched over git")),
    "skopeo": _profile(("REGISTRY_AUTH_FILE", "DOCKER_CONFIG", "CONTAINERS_CONF", "CONTAINERS_REGISTRIES_CONF",
                        "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME"), proxy_password=True,
                       why="where the registry logins and registry settings are (files, not the logins)"),
    "umoci": _profile(why="packs image layers from local files"),
    "apt-get": _profile(("APT_CONFIG",), proxy_password=True, why="apt's own configuration file"),
    "apt-cache": _profile(("APT_CONFIG",), why="apt's own configuration file"),
    "debootstrap": _profile(proxy_password=True, why="the lab's base image, fetched through the proxy"),
    "pulumi": _profile(_PYTHON, ("PULUMI_ACCESS_TOKEN", "PULUMI_CONFIG_PASSPHRASE"), prefixes=("PULUMI_",),
                       proxy_password=True, why=(
        "the engine: its PULUMI_* settings, and the two secrets that are the engine's own (the state "
        "backend's token, the stack's passphrase)")),
    "pip": _profile(_PYTHON, _XDG_FOLDERS, ("PIP_CONFIG_FILE", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CERT",
                                             "PIP_TRUSTED_HOST", "PIP_CACHE_DIR", "REQUESTS_CA_BUNDLE"),
                    proxy_password=True, why=(
        "where packages come from (an index URL may carry its login: pip is the tool it is for), pip's "
        "configuration, cache and certificate authority")),
    "git": _profile(("XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM",
                     "GIT_TEMPLATE_DIR", "GIT_CEILING_DIRECTORIES"), proxy_password=True, why=(
        "where the user's git settings are; never GIT_DIR or GIT_WORK_TREE, which would make `rackform init` "
        "act on another repository")),
    "ipmitool": _profile(why="the BMC's password is given by rackform (IPMI_PASSWORD), the user's none"),
    "ipmi_sim": _profile(("RACKFORM_LAB_STATE_DIR", "RACKFORM_LAB_DIR"),
                         why="the lab's BMC emulator; its power hook finds the lab through these"),
    "systemd-nspawn": _profile(prefixes=("SYSTEMD_",), why="the lab's nodes: nspawn's own SYSTEMD_* switches"),
    "rackform": _profile(_PYTHON, _SSH_AGENT, _ANSIBLE, ("ANSIBLE_SSH_EXTRA_ARGS",), _KUBE, _XDG_FOLDERS,
                         ("RACKFORM_SWITCH_PASSWORD",),
                         prefixes=("RACKFORM_", "HELM_"), refused_prefixes=_HELM["refused_prefixes"],
                         proxy_password=True, why=(
        "rackform itself in a fresh process (the Pulumi provider's stage): what its own tools get, its "
        "RACKFORM_* settings and the switch password, which it turns into a 0600 file for the fabric "
        "stage; never PULUMI_* (the engine's token and passphrase)")),
    "maintenance-hook": _profile(_SSH_AGENT, ("ANSIBLE_PRIVATE_KEY_FILE", "KUBECONFIG"), why=(
        "a site's own program for `rackform maintain --hook`: how to reach the host and the cluster; rackform "
        "adds the host's facts (RACKFORM_HOST ...)")),
}
"""Each tool rackform starts -> what it gets on top of BASE."""
_NO_ADDITIONS = ToolProfile(why="a tool not listed: the base only")


def tool_environment(tool: str, extra: Mapping[str, str] | None = None, *,
                     environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a process of `tool` (a key of TOOLS; any other name gets BASE only):
    the allowed part of `environ` (default: this process's), then `extra` as given, then PATH
    with rackform's own bin folder first."""
    profile = TOOLS.get(tool, _NO_ADDITIONS)
    source = os.environ if environ is None else environ
    env = {name: value for name, value in source.items() if _allowed(profile, name, value)}
    env.update(extra or {})
    env["PATH"] = search_path(env.get("PATH", ""))
    return env


def looks_secret(name: str) -> bool:
    """A variable's name says it holds a secret (and not where one is kept)."""
    upper = name.upper()
    return bool(SECRET_WORDS.search(upper)) and not upper.endswith(PATH_SUFFIXES)


def _allowed(profile: ToolProfile, name: str, value: str) -> bool:
    if name in PROXY_NAMES:
        return profile.proxy_password or not _has_credentials(value)
    if name in BASE or name in profile.names:
        return True
    if name.startswith(BASE_PREFIXES):
        return True
    if name.startswith(profile.refused_prefixes):
        return False
    return name.startswith(profile.prefixes) and not looks_secret(name)


def _has_credentials(url: str) -> bool:
    try:
        return "@" in urlsplit(url if "://" in url else f"//{url}").netloc
    except ValueError:
        return True
