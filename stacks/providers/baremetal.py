"""`BareMetalNode`: one server's power state and boot device, held by its BMC (a dynamic provider).

    create   set the boot device, then power the node to `power_state` (on by default)
    diff     a change of desired power state or boot device is an update; another node
             name is a replacement; where the repo or the BMC's login lives is not a change
    read     (pulumi refresh) the real power state read from the BMC, its firmware and FRU
             serial and product; drift (a node switched off by hand, a board swapped) then
             shows as an update on the next `pulumi up`. A BMC that does not answer is a
             warning and the stored state is kept: one dead BMC never fails a whole refresh
    update   set the boot device if it changed; power to the desired state
    delete   forget the node: dropping it from the program never powers a server off (the
             program registers it with retain_on_delete, so a preview says so)

Telemetry (watts, temperatures) is not state: it changes on every read, so as outputs it
would make every refresh show drift. `rackform bmc status <site>` reads it live.

Every power change is confirmed by reading it back (rackform.ipmi). The boot device
cannot be read back reliably (a one-time PXE flag is consumed by the boot it causes,
and ipmi_sim never reports one), so `read` keeps the boot device last set.

The login: `login: site` reads the node's rotated password from the site's BMC vault
(rackform.secrets) inside the provider process, decrypted with the stack's
rackform:vaultPassword (a secret the engine hands to `configure`; see
providers.credentials) or, where that is not set, with the site's own vault password
file, as the CLI does. `login: factory` uses ADMIN/ADMIN (the lab, and servers fresh
from the factory). No password ever enters the inputs, outputs or state, nor the pickled
provider: `configure` runs after unpickling, and pickling drops what it kept. The
provider is pickled by reference, and rackform is imported inside the methods.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    ConfigureRequest,
    CreateResult,
    DiffResult,
    ReadResult,
    Resource,
    ResourceProvider,
    UpdateResult,
)

from providers.credentials import StageCredentials
from providers.pickling import one_sorting_pickler

INPUT_KEYS = ("site", "root", "node", "bmc_address", "bmc_port", "power_state", "boot_device", "login")
OUTPUT_KEYS = ("firmware", "serial", "product")
TELEMETRY_KEYS = ("power_draw_w", "temperatures_c")
"""Outputs of earlier versions: dropped from the state on the next read (see `rackform bmc status`)."""
POWER_STATES = ("on", "off")
BOOT_DEVICES = ("pxe", "disk", "cdrom", "bios", "none")
LOGINS = ("site", "factory")
DESIRED_KEYS = ("power_state", "boot_device")
"""What the program wants of the node: a difference here is an update."""


class BareMetalError(Exception):
    """The BMC could not do it (after its retries); the message says why (no password in it)."""


@dataclass(frozen=True, slots=True)
class BareMetalNodeArgs:
    site: pulumi.Input[str]
    root: pulumi.Input[str]
    """Repo root (for the site's secret store)."""
    node: pulumi.Input[str]
    bmc_address: pulumi.Input[str]
    bmc_port: pulumi.Input[int] = 623
    power_state: pulumi.Input[str] = "on"
    boot_device: pulumi.Input[str] = "disk"
    """`pxe` for a (re)install: one time, the boot it causes consumes it."""
    login: pulumi.Input[str] = "site"


class BareMetalProvider(ResourceProvider):
    """CRUD for one node's BMC."""

    serialize_as_secret_always = False  # the pickled provider holds no secrets (see __getstate__)
    credentials = StageCredentials()
    """The stack's credentials, set by `configure` in the provider process."""

    def configure(self, req: ConfigureRequest) -> None:
        self.credentials = StageCredentials.from_config(req.config)

    def __getstate__(self) -> dict[str, Any]:
        return {}  # never pickle the stack's secrets into the state

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        return CheckResult(news, check_inputs(news))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [key for key in (*DESIRED_KEYS, "bmc_address", "bmc_port") if olds.get(key) != news.get(key)]
        replaces = ["node"] if olds.get("node") != news.get("node") else []
        return DiffResult(changes=bool(changed or replaces), replaces=replaces, stables=["site"],
                          delete_before_replace=False)

    def create(self, props: dict[str, Any]) -> CreateResult:
        outs = apply(props, self.credentials, set_boot=True)
        return CreateResult(id_=f"{props['site']}/{props['node']}", outs=outs)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        set_boot = olds.get("boot_device") != news.get("boot_device")
        return UpdateResult(outs=apply(news, self.credentials, set_boot=set_boot))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        stored = {key: value for key, value in props.items() if key not in TELEMETRY_KEYS}
        try:
            observed = observe(props, self.credentials)
        except BareMetalError as error:
            pulumi.log.warn(f"{error}; keeping the stored state of {id_}")
            return ReadResult(id_=id_, outs=stored)
        return ReadResult(id_=id_, outs={**stored, **observed})

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None


class BareMetalNode(Resource, module="rackform", name="BareMetalNode"):
    """One server's BMC-held state (type `pulumi-python:dynamic/rackform:BareMetalNode`)."""

    node: pulumi.Output[str]
    bmc_address: pulumi.Output[str]
    power_state: pulumi.Output[str]
    """Desired in the program; after a refresh, what the BMC reads."""
    boot_device: pulumi.Output[str]
    firmware: pulumi.Output[str]
    serial: pulumi.Output[str]
    """From the BMC's FRU, where it offers one."""
    product: pulumi.Output[str]

    def __init__(self, name: str, args: BareMetalNodeArgs, opts: pulumi.ResourceOptions | None = None):
        props = {key: getattr(args, key) for key in INPUT_KEYS} | dict.fromkeys(OUTPUT_KEYS)
        with one_sorting_pickler():  # providers/pickling.py: linear, and no RecursionError at 1,000 nodes
            super().__init__(BareMetalProvider(), name, props, opts)


def check_inputs(news: dict[str, Any]) -> list[CheckFailure]:
    failures = [CheckFailure(key, "required") for key in ("site", "root", "node", "bmc_address") if not news.get(key)]
    for key, allowed in (("power_state", POWER_STATES), ("boot_device", BOOT_DEVICES), ("login", LOGINS)):
        if news.get(key) not in allowed:
            failures.append(CheckFailure(key, f"{news.get(key)!r} is not one of {', '.join(allowed)}"))
    if news.get("bmc_address"):
        try:
            ipaddress.ip_address(news["bmc_address"])
        except ValueError:
            failures.append(CheckFailure("bmc_address", f"{news['bmc_address']!r} is not an IP address"))
    return failures


# --- the BMC work (rackform imported here, in the provider process) -----------------------------


def apply(props: dict[str, Any], credentials: StageCredentials, *, set_boot: bool) -> dict[str, Any]:
    """Boot device (if asked), then the power state, then fresh readings: the resource's outputs."""
    from rackform.ipmi.status import read_node_status

    def converge(client):
        if set_boot:
            client.set_boot_device(props["boot_device"])
        if client.power_state() != props["power_state"]:
            client.set_power(props["power_state"])
        return read_node_status(client)

    status = _on_bmc(props, credentials, converge, "apply")
    return {**{key: props[key] for key in INPUT_KEYS}, **_outputs(status)}


def observe(props: dict[str, Any], credentials: StageCredentials) -> dict[str, Any]:
    """What the BMC reports now: the real power state and its inventory (no telemetry)."""
    from rackform.ipmi.status import read_node_status

    status = _on_bmc(props, credentials, read_node_status, "read")
    return {"power_state": status.power, **_outputs(status)}


def _outputs(status) -> dict[str, Any]:
    return {"firmware": status.firmware, "serial": status.inventory.serial, "product": status.inventory.product}


def _on_bmc(props: dict[str, Any], credentials: StageCredentials, operation, what: str):
    from rackform.ipmi.fleet import BmcTarget

    target = BmcTarget(props["node"], props["bmc_address"], int(props.get("bmc_port") or 623))
    result = fleet_for(props, credentials).run([target], operation)[0]
    if not result.ok:
        raise BareMetalError(f"{props['node']} ({props['bmc_address']}): {what} failed: {result.describe()}")
    return result.value


def fleet_for(props: dict[str, Any], credentials: StageCredentials):
    """A Fleet with the node's login; tests swap this for one with short timeouts."""
    from rackform.ipmi.credentials import factory_credentials
    from rackform.ipmi.fleet import Fleet

    if props.get("login", "site") == "factory":
        return Fleet(factory_credentials())
    return Fleet(site_logins(props["site"], credentials))


def site_logins(site: str, credentials: StageCredentials):
    """node -> its rotated BMC login, from the site's vault, decrypted once.

    The vault password is the stack's rackform:vaultPassword where set (a 0600 file that
    exists only while the vault is read), else the site's own password file, as the CLI.
    """
    from rackform.ipmi.credentials import Credentials, CredentialsUnavailable
    from rackform.secrets import SecretsError, SiteVault

    vault_only = StageCredentials(vault_password=credentials.vault_password)
    with vault_only.environment() as env:
        try:
            vault = SiteVault(site, environ={**os.environ, **env})
            logins = vault.load()
        except SecretsError as error:
            raise BareMetalError(f"site {site}: BMC vault: {error}") from None

    def lookup(node: str) -> Credentials:
        found = logins.get(node)
        if found is None:
            raise CredentialsUnavailable(f"no BMC credentials for {node} in {vault.vault_file}: run "
                                         f"`rackform secrets {site}` (and provision) first")
        return Credentials(found.user, found.password, found.previous)

    return lookup
