"""Preflight checks: racks. Power within budget, devices inside the rack, one device per U."""

from __future__ import annotations

from collections.abc import Iterator

from rackform.checks.registry import check
from rackform.checks.findings import Finding
from rackform.model.site import Device, Rack, Site

# Above this share of the budget a rack is legal but has little headroom left
# (PSU failover and ambient temperature both eat into it).
POWER_WARNING_SHARE = 0.8


def _device_key(rack: Rack, device: Device) -> str:
    return f"racks[{rack.name}].devices[{device.name}]"


def _u_span(device: Device) -> str:
    return f"U{device.position_u}" if device.top_u == device.position_u else f"U{device.position_u}-U{device.top_u}"


@check
def rack_power(site: Site) -> Iterator[Finding]:
    """The devices of a rack draw no more than its power budget (warning above 80 %)."""
    for rack in site.racks:
        draw_w = sum(device.power_w(site.power_basis) for device in rack.devices)
        share = draw_w / rack.power_budget_w
        if draw_w <= rack.power_budget_w * POWER_WARNING_SHARE:
            continue
        biggest = sorted(rack.devices, key=lambda d: d.power_w(site.power_basis), reverse=True)[:3]
        largest = ", ".join(f"{d.name} {d.power_w(site.power_basis):,} W" for d in biggest)
        figures = (
            f"rack {rack.name} draws {draw_w:,} W ({site.power_basis} basis), {share:.0%} of its "
            f"{rack.power_budget_w:,} W budget; largest: {largest}"
        )
        if draw_w > rack.power_budget_w:
            yield Finding(
                "rack_power", "error", rack.budget_loc, f"racks[{rack.name}].power_budget_w",
                f"{figures}: move {draw_w - rack.power_budget_w:,} W of devices to another rack or raise the budget",
            )
        else:
            yield Finding(
                "rack_power", "warning", rack.budget_loc, f"racks[{rack.name}].power_budget_w",
                f"{figures}: over {POWER_WARNING_SHARE:.0%} leaves little headroom",
            )


@check
def rack_height(site: Site) -> Iterator[Finding]:
    """Every device sits between U1 and the top of its rack."""
    for rack in site.racks:
        for device in rack.devices:
            size = f"{device.name} ({device.block.name}, {device.block.rack_units}U)"
            if device.position_u < 1:
                yield Finding(
                    "rack_height", "error", device.loc, f"{_device_key(rack, device)}.position_u",
                    f"{size} starts at U{device.position_u}: the lowest position is U1",
                )
            elif device.top_u > rack.height_u:
                highest_start = rack.height_u - device.block.rack_units + 1
                yield Finding(
                    "rack_height", "error", device.loc, f"{_device_key(rack, device)}.position_u",
                    f"{size} occupies {_u_span(device)}, above the top of the "
                    f"{rack.height_u}U rack {rack.name}: start it at U{highest_start} or lower",
                )


@check
def rack_units_free(site: Site) -> Iterator[Finding]:
    """No two devices share a rack unit; each clash names both devices."""
    for rack in site.racks:
        holder: dict[int, Device] = {}
        for device in rack.devices:
            clashes: dict[str, tuple[Device, list[int]]] = {}
            for u in range(device.position_u, device.top_u + 1):
                other = holder.get(u)
                if other is None:
                    holder[u] = device
                else:
                    clashes.setdefault(other.name, (other, []))[1].append(u)
            for other, units in clashes.values():
                shared = f"U{units[0]}" if len(units) == 1 else f"U{units[0]}-U{units[-1]}"
                yield Finding(
                    "rack_units_free", "error", device.loc, f"{_device_key(rack, device)}.position_u",
                    f"{device.name} ({_u_span(device)}) overlaps {other.name} ({_u_span(other)}, line "
                    f"{other.loc.line}) at {shared} in rack {rack.name}",
                )
