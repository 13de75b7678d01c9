"""Stage storage (roles storage_server, storage_client): the data sets served over NFSv4, each
to its clients only, as the host variables rackform renders say (rackform.render.storage_vars).

- a server: its NFS service runs and listens on 2049; its configuration exports exactly the
  data sets of its `storage_exports`, each to exactly its clients (an address added by hand
  is named); each data set's marker file is in place;
- a client: reads the marker of every data set it may read (`storage_mounts`) over the storage
  network with libnfs's nfs-cat, and its sha256 is the one rendered;
- another host on the storage network: each server refuses its read (`storage_refused`);
- all of them: the storage ports have the fabric's host MTU (jumbo frames).
"""

from __future__ import annotations

import hashlib
import shlex

import pytest

from checklib import mismatches
from nfslib import ganesha_exports, kernel_exports

pytestmark = [pytest.mark.stage("storage"), pytest.mark.machines("servers")]

SERVER_ROLE = "storage_server"
NFS_PORT = 2049
SERVICE = {"ganesha": "nfs-ganesha.service", "kernel": "nfs-server.service"}
KERNEL_OPTIONS = {"ro", "rw", "root_squash", "no_root_squash", "all_squash"}
"""The /etc/exports options the check compares (besides fsid): access and squashing."""
READ_TIMEOUT_S = 20
"""A read that has not finished by then has failed (nfs-cat waits on an unanswered server)."""


def _listed(machine_vars, key: str) -> list[dict]:
    entries = machine_vars.get(key) or []
    if not entries:
        pytest.skip(f"no {key} on this machine")
    return entries


@pytest.fixture
def exports(machine_vars) -> list[dict]:
    return _listed(machine_vars, "storage_exports")


@pytest.fixture
def nfs_server(machine_vars, exports) -> str:
    return machine_vars.get("storage_server_nfs_server", machine_vars.get("storage_nfs_server", "kernel"))


def nfs_url(entry: dict, file: str | None = None) -> str:
    """libnfs's URL of a data set (or a file in it) on its server, NFSv4."""
    return f"nfs://{entry['address']}{entry['pseudo']}/{file or entry['marker_file']}?version=4"


def read_sha256(host, url: str):
    """sha256 of what nfs-cat reads at `url` on this machine: (result, hex digest or None)."""
    result = host.run(f"bash -o pipefail -c {shlex.quote(f'timeout {READ_TIMEOUT_S} nfs-cat {shlex.quote(url)} | sha256sum')}")
    digest = result.stdout.split()[0] if result.rc == 0 and result.stdout.strip() else None
    return result, digest


def _why(result) -> str:
    detail = " ".join((result.stderr or result.stdout or "").split())
    return f"exit {result.rc}" + (f": {detail[:160]}" if detail else "")


# ---------------------------------------------------------------- servers


def test_nfs_service_enabled_and_running(unit_state, nfs_server):
    unit = SERVICE[nfs_server]
    state = unit_state(unit)
    assert (state["ActiveState"], state["UnitFileState"]) == ("active", "enabled"), (
        f"{unit} is {state['ActiveState']} ({state['SubState']}), {state['UnitFileState'] or 'not installed'}")


def test_nfs_listens_on_2049(host, exports, machine_vars):
    listening = host.run("ss -Hltn").stdout.split()
    ports = {word.rsplit(":", 1)[1] for word in listening if ":" in word}
    assert str(NFS_PORT) in ports, f"nothing listens on TCP {NFS_PORT} (storage address {machine_vars.get('storage_address')})"


def test_exports_are_the_designed_ones(host, exports, nfs_server, role_setting):
    """Each data set exported with its id and path, to exactly its clients with its mode, root
    squashed; no other export, no other client (an address added by hand is named)."""
    if nfs_server == "ganesha":
        path = role_setting(SERVER_ROLE, "storage_server_ganesha_config")
        config = host.file(path)
        assert config.exists, f"{path} is missing"
        live = {pseudo: (dict(export, clients=None), export["clients"])
                for pseudo, export in ganesha_exports(config.content_string).items()}
        want = {entry["pseudo"]: ({"export_id": str(entry["export_id"]), "path": entry["path"], "access": "NONE",
                                   "squash": "root_squash", "clients": None},
                                  dict.fromkeys(entry["clients"], entry["mode"].upper()))
                for entry in exports}
    else:
        path = role_setting(SERVER_ROLE, "storage_server_exports_file")
        root = role_setting(SERVER_ROLE, "storage_server_nfs4_root")
        table = host.file(path)
        assert table.exists, f"{path} is missing"
        kept = lambda options: ",".join(sorted(o for o in options if o in KERNEL_OPTIONS or o.startswith("fsid=")))  # noqa: E731
        live = {name: ({}, {client: kept(options) for client, options in clients.items()})
                for name, clients in kernel_exports(table.content_string).items() if name != root}
        want = {f"{root}/{entry['name']}": ({}, dict.fromkeys(entry["clients"], kept(
                    {entry["mode"], "root_squash", f"fsid={entry['export_id']}"})))
                for entry in exports}
    problems = [f"{name}: exported, not a data set of this server" for name in sorted(set(live) - set(want))]
    for name, (settings, clients) in want.items():
        if name not in live:
            problems.append(f"{name}: not exported")
            continue
        live_settings, live_clients = live[name]
        extra = sorted(set(live_clients) - set(clients))
        if extra:
            problems.append(f"{name}: admits {', '.join(extra)}, not a client of the data set")
        differing = mismatches(live_settings, settings) or mismatches(
            {client: access for client, access in live_clients.items() if client in clients}, clients)
        if differing:
            problems.append(f"{name}: {differing}")
    assert not problems, f"{path}: {'; '.join(problems)}"


def test_data_set_markers_in_place(host, exports):
    problems = []
    for entry in exports:
        marker = host.file(f"{entry['path']}/{entry['marker_file']}")
        want = hashlib.sha256(entry["marker"].encode()).hexdigest()
        if not marker.exists:
            problems.append(f"{entry['name']}: {marker.path} missing")
        elif marker.sha256sum != want:
            problems.append(f"{entry['name']}: {marker.path} sha256 {marker.sha256sum}, want {want}")
    assert not problems, "; ".join(problems)


# ---------------------------------------------------------------- clients and the refused


def test_reads_every_data_set_it_may(host, machine_vars):
    """nfs-cat of each data set's marker, over the storage network, gives the rendered sha256."""
    problems = []
    for entry in _listed(machine_vars, "storage_mounts"):
        url = nfs_url(entry)
        result, digest = read_sha256(host, url)
        if digest is None:
            problems.append(f"{entry['name']}: {url}: {_why(result)}")
        elif digest != entry["marker_sha256"]:
            problems.append(f"{entry['name']}: {url}: sha256 {digest}, want {entry['marker_sha256']}")
    assert not problems, "; ".join(problems)


def test_refused_by_every_data_set_it_may_not_read(host, machine_vars):
    """A host on the storage network outside a data set's clients reads nothing of it: the
    server answers with an NFSv4 error (Ganesha hides the export: NFS4ERR_NOENT). A server that
    does not answer at all proves nothing, and fails the check too."""
    problems = []
    for entry in _listed(machine_vars, "storage_refused"):
        url = nfs_url(entry)
        result, digest = read_sha256(host, url)
        if digest is not None:
            problems.append(f"read although not a client: {entry['name']} ({url}, sha256 {digest})")
        elif "NFS4ERR" not in result.stderr + result.stdout:
            problems.append(f"{entry['name']}: {url}: no answer from the server ({_why(result)})")
    assert not problems, "; ".join(problems)


# ---------------------------------------------------------------- every host on the storage network


def test_storage_ports_have_the_fabric_mtu(machine_vars, links):
    ports = _listed(machine_vars, "storage_ports")
    mtu = int(machine_vars.get("base_os_fabric_mtu", machine_vars.get("fabric_host_mtu", 9000)))
    live = {port: links[port].mtu if port in links else "missing" for port in ports}
    problems = mismatches(live, dict.fromkeys(ports, mtu))
    assert not problems, f"storage port MTU {problems}"
