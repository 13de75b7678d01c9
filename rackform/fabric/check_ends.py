"""The links of a site's RoCE fabric and what each end of each runs.

A link is a cable between a host fabric port and a leaf or spine, or between two
fabric switches. For each end, `DesignEnds.end` says what the design wants there (the
preflight's `host_settings` / `switch_settings`, overrides applied) and `live_end`
what the device runs, read by `rackform.fabric.live`. Both are plain dicts from a
setting name to its value, so `rackform.fabric.check` compares them setting by
setting; a setting an end does not have is absent, one it cannot give is `Unreadable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from rackform.checks.cabling import host_fabric_links
from rackform.checks.roce import host_settings, switch_settings
from rackform.fabric.check_parse_switch import SwitchQos
from rackform.fabric.live import NO_RDMA_NIC, VIRTUAL_LINK, LiveDevice, NicState, Unreadable
from rackform.model.schema import Fabric, RoceOverrides
from rackform.model.site import Endpoint, Host, Site
from rackform.model.source import Loc

FABRIC_SWITCH_ROLES = ("leaf", "spine")
CONFIG_PREFIX = "config."
"""Host settings as the roce_host role persisted them (/etc/rackform/roce-host.json)."""
HOST_CONFIG_SETTINGS = ("trust", "pfc_priorities", "roce_path", "cnp_priority", "ecn", "mtu")
ONYX_DEFAULT_MTU = 1500
WATCHDOG_NOT_SAID = "the switch's configuration does not say"

EndValues = dict[str, object]


@dataclass(frozen=True, slots=True)
class RocePath:
    """How an end classifies RoCE: the DSCP it sees, the priority that gets, and that
    priority's traffic class (queue)."""

    dscp: int | None
    priority: int | None
    traffic_class: int | None

    def __str__(self) -> str:
        def text(value):
            return "nothing" if value is None else str(value)
        return f"DSCP {text(self.dscp)} -> priority {text(self.priority)} -> TC {text(self.traffic_class)}"


@dataclass(frozen=True, slots=True)
class EcnThresholds:
    """Where a switch starts and stops marking ECN on the RoCE queue."""

    min_kb: int | None
    max_kb: int | None

    def __str__(self) -> str:
        return f"{self.min_kb}/{self.max_kb} KB"


@dataclass(frozen=True, slots=True)
class FabricLink:
    """A cabled fabric link. For host links `a` is the host's end."""

    a: Endpoint
    b: Endpoint
    host_link: bool
    a_speed_gbps: int
    b_speed_gbps: int
    cable_index: int
    loc: Loc

    @property
    def ends(self) -> tuple[Endpoint, Endpoint]:
        return self.a, self.b

    def __str__(self) -> str:
        return f"{self.a} - {self.b}"


def fabric_links(site: Site) -> list[FabricLink]:
    """Host-to-fabric-switch links (from the preflight's cabling walk), then switch-to-switch
    links between leaves and spines, in cabling order."""
    links = [
        FabricLink(Endpoint(link.host.name, link.host_port.name), Endpoint(link.switch.name, link.switch_port.name),
                   True, link.host_port.speed_gbps, link.switch_port.speed_gbps, link.cable_index, link.cable.loc)
        for link in host_fabric_links(site) if link.switch.role in FABRIC_SWITCH_ROLES
    ]
    switches = site.switches
    for index, cable in enumerate(site.cables):
        a, b = switches.get(cable.a.device), switches.get(cable.b.device)
        if a is None or b is None or a.role not in FABRIC_SWITCH_ROLES or b.role not in FABRIC_SWITCH_ROLES:
            continue
        a_port, b_port = a.ports.get(cable.a.port), b.ports.get(cable.b.port)
        if a_port is None or b_port is None:
            continue  # the preflight's cable_ends_exist reports it
        links.append(FabricLink(cable.a, cable.b, False, a_port.speed_gbps, b_port.speed_gbps, index, cable.loc))
    return links


# ---------------------------------------------------------------- the design's view


class DesignEnds:
    """What the design wants at each end of a link.

    Devices with the same overrides want the same: values are computed once per
    `kind` (see `kind`), so a 10,000-host site computes a handful of them.
    """

    def __init__(self, site: Site):
        self.site = site
        self.kind = lru_cache(maxsize=None)(self._kind)
        self._values = lru_cache(maxsize=None)(self._kind_values)

    def _kind(self, device: str) -> tuple:
        """What a device's design values depend on: host or switch, its overrides, OS and ASN."""
        host = self.site.hosts.get(device)
        if host is not None:
            return ("host", _overrides_key(host.device.roce_overrides))
        switch = self.site.switches[device]
        return ("switch", _overrides_key(switch.device.roce_overrides), switch.os, switch.asn is not None)

    def end(self, link: FabricLink, end: Endpoint, speed_gbps: int) -> EndValues:
        kind = self.kind(end.device)
        values = dict(self._values(kind))
        if kind[0] == "switch":
            values["description"] = str(link.b if end == link.a else link.a)  # the cabling plan's far end
            if not link.host_link and kind[3]:
                values["bgp_unnumbered"] = True
        values["speed_gbps"] = speed_gbps
        values["link_state"] = "up"
        return values

    def _kind_values(self, kind: tuple) -> EndValues:
        overrides = RoceOverrides.model_validate_json(kind[1]) if kind[1] else None
        if kind[0] == "host":
            return self._host_values(overrides)
        return self._switch_values(overrides, kind[2])

    def _host_values(self, overrides: RoceOverrides | None) -> EndValues:
        fabric: Fabric = self.site.fabric
        settings = host_settings(fabric, overrides)
        roce = fabric.roce
        values: EndValues = {
            "trust": settings.trust,
            "pfc_priorities": settings.pfc_priorities,
            # The host marks DSCP roce_tos >> 2; roce_host maps it to the RoCE priority.
            "roce_path": RocePath(settings.roce_tos >> 2, roce.priority, roce.priority),
            "cnp_priority": roce.cnp_priority,
            "ecn": settings.ecn,
            "mtu": settings.mtu,
        }
        # What the roce_host unit applies at boot must say the same.
        values.update({f"{CONFIG_PREFIX}{name}": values[name] for name in HOST_CONFIG_SETTINGS})
        return values

    def _switch_values(self, overrides: RoceOverrides | None, os_name: str) -> EndValues:
        fabric: Fabric = self.site.fabric
        settings = switch_settings(fabric, overrides)
        roce = fabric.roce
        priority = settings.dscp_to_priority.get(roce.dscp)
        values: EndValues = {
            "trust": settings.trust,
            "pfc_priorities": settings.pfc_priorities,
            "roce_path": RocePath(roce.dscp, priority, priority),  # queues follow priorities by default
            "cnp_priority": settings.dscp_to_priority.get(roce.cnp_dscp),
            "ecn": settings.ecn,
            "pfc_watchdog": settings.pfc_watchdog,
            "mtu": settings.mtu,
        }
        if settings.ecn:
            values["ecn_thresholds_kb"] = EcnThresholds(settings.ecn_min_kb, settings.ecn_max_kb)
        if os_name == "cumulus":
            values["mtu_persisted"] = settings.mtu
        return values

    def host_wide(self, host: Host) -> EndValues:
        """Host settings that belong to no one link: the roce_host role's files, unit and sysctl."""
        settings = host_settings(self.site.fabric, host.device.roce_overrides)
        return {
            "roce_host_config": "present",
            "roce_host_unit": "enabled",
            "nccl_ib_tc": str(settings.roce_tos),
            "net.ipv4.tcp_ecn": "1" if settings.ecn else "0",
        }


def _overrides_key(overrides: RoceOverrides | None) -> str:
    return "" if overrides is None else overrides.model_dump_json(exclude_none=True)


# ---------------------------------------------------------------- the live view


def live_end(site: Site, device: LiveDevice, port: str) -> EndValues:
    """What `device` runs on `port`, as the same settings the design gives."""
    if device.error is not None:
        reason = Unreadable(f"unreachable: {device.error}")
        return {"link_state": reason}
    if device.os == "host":
        return _live_host_end(site, device, port)
    return _live_switch_end(site, device, port)


def _link_values(device: LiveDevice, port: str) -> EndValues:
    link = device.links.get(port)
    if link is None:
        return {"link_state": "missing"}
    values: EndValues = {"description": link.alias} if device.os != "host" else {}
    speed_mbps = device.speeds_mbps.get(port)
    if link.kind == "veth":
        speed = Unreadable(VIRTUAL_LINK)
    elif speed_mbps is None or speed_mbps <= 0:
        speed = Unreadable("link down: no speed")
    else:
        speed = speed_mbps // 1000
    values.update(link_state="up" if link.up else "down", mtu=link.mtu, speed_gbps=speed)
    return values


def _live_host_end(site: Site, device: LiveDevice, port: str) -> EndValues:
    values = _link_values(device, port)
    if values["link_state"] == "missing":
        return values
    nic = device.nics.get(port) or NicState(*(Unreadable(NO_RDMA_NIC),) * 4)
    roce = site.fabric.roce
    qos = nic.qos
    if isinstance(qos, Unreadable):
        values.update(trust=qos, pfc_priorities=qos, roce_path=qos)
    else:
        values.update(trust=qos.trust, pfc_priorities=qos.pfc_priorities)
        if isinstance(nic.roce_tos, Unreadable):
            values["roce_path"] = nic.roce_tos
        else:
            dscp = nic.roce_tos >> 2
            priority = qos.dscp_to_priority.get(dscp)
            values["roce_path"] = RocePath(dscp, priority, qos.priority_to_tc.get(priority, priority)
                                           if priority is not None else None)
    values["cnp_priority"] = nic.cnp_priority
    ecn = nic.ecn_priorities
    values["ecn"] = ecn if isinstance(ecn, Unreadable) else roce.priority in ecn
    values.update(_host_config_values(device))
    return values


def _host_config_values(device: LiveDevice) -> EndValues:
    config = device.roce_config
    if config is None:
        return {}  # no file at all: reported once per host (roce_host_config)
    if isinstance(config, Unreadable):
        return {f"{CONFIG_PREFIX}{name}": config for name in HOST_CONFIG_SETTINGS}
    dscp = None if config.roce_tos is None else config.roce_tos >> 2
    values = {
        "trust": config.trust,
        "pfc_priorities": config.pfc_priorities,
        "roce_path": RocePath(dscp, config.roce_priority, config.roce_priority),
        "cnp_priority": config.cnp_priority,
        "ecn": config.ecn,
        "mtu": config.mtu,
    }
    return {f"{CONFIG_PREFIX}{name}": value for name, value in values.items()}


def _live_switch_end(site: Site, device: LiveDevice, port: str) -> EndValues:
    if device.os == "onyx":
        values: EndValues = {"link_state": Unreadable("not read from Onyx"),
                             "speed_gbps": Unreadable("not read from Onyx")}
    else:
        values = _link_values(device, port)
        if values["link_state"] == "missing":
            return values
    qos = device.qos
    if isinstance(qos, SwitchQos):
        values.update(_switch_qos_values(site, qos, port))
        if device.os == "onyx":
            values["mtu"] = qos.mtu_by_port.get(port, ONYX_DEFAULT_MTU)
            values["description"] = qos.description_by_port.get(port)
    elif isinstance(qos, Unreadable):
        values.update(dict.fromkeys(("trust", "pfc_priorities", "roce_path", "cnp_priority", "ecn"), qos))
    if device.interfaces is not None:
        stanza = None if isinstance(device.interfaces, Unreadable) else device.interfaces.get(port)
        values["mtu_persisted"] = (device.interfaces if isinstance(device.interfaces, Unreadable)
                                   else stanza.mtu if stanza is not None else None)
    if isinstance(device.bgp, Unreadable):
        values["bgp_unnumbered"] = device.bgp
    elif device.bgp is not None:
        values["bgp_unnumbered"] = port in device.bgp.unnumbered_ports
    return values


def _switch_qos_values(site: Site, qos: SwitchQos, port: str) -> EndValues:
    roce = site.fabric.roce
    priority = qos.dscp_to_priority.get(roce.dscp)
    # ECN belongs on the queue the design gives RoCE; a broken DSCP map is roce_path's to report.
    ecn = qos.ecn(port)
    ecn_on = ecn is not None and qos.traffic_class(roce.priority) in ecn.traffic_classes
    values: EndValues = {
        "trust": qos.trust(port),
        "pfc_priorities": tuple(qos.pfc(port)),
        "roce_path": RocePath(roce.dscp, priority, qos.traffic_class(priority)),
        "cnp_priority": qos.dscp_to_priority.get(roce.cnp_dscp),
        "ecn": ecn_on,
        "pfc_watchdog": (Unreadable(WATCHDOG_NOT_SAID) if qos.pfc_watchdog_ports is None
                         else port in qos.pfc_watchdog_ports),
    }
    if ecn_on:
        values["ecn_thresholds_kb"] = EcnThresholds(ecn.min_kb, ecn.max_kb)
    return values


def live_host_wide(device: LiveDevice) -> EndValues:
    if device.error is not None:
        return {}
    nccl = device.nccl
    return {
        "roce_host_config": "missing" if device.roce_config is None else "present",
        "roce_host_unit": device.roce_unit,
        "nccl_ib_tc": "no /etc/nccl.conf" if nccl is None else nccl.get("NCCL_IB_TC"),
        "net.ipv4.tcp_ecn": device.sysctls.get("net.ipv4.tcp_ecn", Unreadable("sysctl not read")),
    }
