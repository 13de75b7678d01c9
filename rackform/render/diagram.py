"""Front rack elevations as SVG: what a person checks before cabling a rack.

One drawing per rack, the way vendors draw them: U numbers down the rail (U1 at
the bottom), each device a box over its U range labelled with its name, hosts and
block type, coloured by block category, empty U as empty slots, and a footer with
power used against the rack budget and U used. Built as plain text (no SVG
library) so the output is byte-for-byte deterministic and easy to diff.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from rackform.model.site import Device, Rack, Site

# ---------------------------------------------------------------- layout (px)

MARGIN_PX = 16
HEADER_PX = 58
RAIL_PX = 30
SLOT_WIDTH_PX = 500
U_PX = 20
FOOTER_PX = 92
PROBLEM_ROW_PX = 18
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
CHAR_WIDTH_EM = 0.6
"""Average glyph width of the sans fonts above, to shorten labels that would overflow."""

AMBER_ABOVE_PERCENT = 80.0
RED_ABOVE_PERCENT = 100.0


@dataclass(frozen=True, slots=True)
class Palette:
    fill: str
    stroke: str
    text: str


CATEGORY_PALETTE = {
    "gpu": Palette("#76b900", "#4d7a00", "#0b1a00"),  # NVIDIA green
    "hci": Palette("#2563eb", "#1e40af", "#ffffff"),
    "compute": Palette("#0d9488", "#115e59", "#ffffff"),
    "storage": Palette("#d97706", "#92400e", "#ffffff"),
    "switch": Palette("#374151", "#111827", "#ffffff"),
}
UNKNOWN_PALETTE = Palette("#9ca3af", "#4b5563", "#111827")
POWER_COLOURS = {"ok": "#15803d", "amber": "#d97706", "red": "#dc2626"}

# ---------------------------------------------------------------- text helpers

# Characters XML 1.0 cannot carry at all, even escaped.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


_XML_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})
_XML_NEEDS_WORK = re.compile('[&<>"\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]')


def xml_text(value: object) -> str:
    """Escape for element text and double-quoted attributes."""
    if type(value) in (int, float):  # most attributes are coordinates: nothing to escape
        return str(value)
    text = str(value)
    if _XML_NEEDS_WORK.search(text) is None:
        return text
    return _XML_INVALID.sub("\ufffd", text).translate(_XML_ESCAPES)


def fit(text: str, width_px: float, font_px: float) -> str:
    """Shorten `text` with an ellipsis so it fits `width_px` at `font_px`."""
    max_chars = int(width_px / (font_px * CHAR_WIDTH_EM))
    if len(text) <= max_chars:
        return text
    return text[: max(max_chars - 1, 0)] + "…"


def kw(watts: int) -> str:
    return f"{watts / 1000:.1f} kW"


def device_power_text(watts: int) -> str:
    """Watts below 1 kW (switches), kW above: both stay readable at a glance."""
    return f"{watts} W" if watts < 1000 else kw(watts)


_ATTRIBUTE_NAMES: dict[str, str] = {}
"""Keyword -> SVG attribute name (`class_` -> `class`, `data_u` -> `data-u`), made once each."""


def element(tag: str, text: str | None = None, **attrs: object) -> str:
    """One SVG element; `class_` and `data_u` style names become `class` and `data-u`."""
    parts = [tag]
    for name, value in attrs.items():
        if value is None:
            continue
        shown = _ATTRIBUTE_NAMES.get(name)
        if shown is None:
            shown = _ATTRIBUTE_NAMES[name] = name.rstrip("_").replace("_", "-")
        parts.append(f'{shown}="{xml_text(value)}"')
    opening = " ".join(parts)
    if text is None:
        return f"<{opening}/>"
    return f"<{opening}>{xml_text(text)}</{tag}>"


# ---------------------------------------------------------------- figures


@dataclass(frozen=True, slots=True)
class RackFigures:
    power_w: int
    used_u: int
    occupied: dict[int, int]
    """How many devices claim each U inside the rack (more than 1: a clash)."""

    def power_percent(self, budget_w: int) -> float:
        return 100.0 * self.power_w / budget_w if budget_w else float("inf")


def rack_figures(rack: Rack, power_basis: str) -> RackFigures:
    occupied: dict[int, int] = {}
    for device in rack.devices:
        for u in range(max(device.position_u, 1), min(device.top_u, rack.height_u) + 1):
            occupied[u] = occupied.get(u, 0) + 1
    power_w = sum(device.power_w(power_basis) for device in rack.devices)
    return RackFigures(power_w=power_w, used_u=len(occupied), occupied=occupied)


def u_ranges(units: list[int]) -> str:
    """[2, 3, 4, 9] -> "U2-U4, U9"."""
    spans: list[list[int]] = []
    for u in sorted(units):
        if spans and u == spans[-1][1] + 1:
            spans[-1][1] = u
        else:
            spans.append([u, u])
    return ", ".join(f"U{low}" if low == high else f"U{low}-U{high}" for low, high in spans)


def placement_problems(rack: Rack, figures: RackFigures) -> list[str]:
    """Overlaps and devices outside the rack, named in the footer (the checks report them too)."""
    problems = []
    clashing = [u for u, count in figures.occupied.items() if count > 1]
    if clashing:
        problems.append(f"overlap at {u_ranges(clashing)}")
    for device in rack.devices:
        if device.top_u > rack.height_u or device.position_u < 1:
            problems.append(f"{device.name} outside U1-U{rack.height_u}")
    return problems


def is_misplaced(device: Device, rack: Rack, figures: RackFigures) -> bool:
    """Outside the rack or sharing a U with another device."""
    if device.top_u > rack.height_u or device.position_u < 1:
        return True
    return any(figures.occupied.get(u, 0) > 1 for u in range(device.position_u, device.top_u + 1))


def power_level(percent: float) -> str:
    if percent > RED_ABOVE_PERCENT:
        return "red"
    if percent > AMBER_ABOVE_PERCENT:
        return "amber"
    return "ok"


# ---------------------------------------------------------------- geometry


@dataclass(frozen=True, slots=True)
class Frame:
    """Where the rack body sits in the drawing."""

    height_u: int
    footer_px: int = FOOTER_PX

    @property
    def slot_x(self) -> int:
        return MARGIN_PX + RAIL_PX

    @property
    def top_y(self) -> int:
        return HEADER_PX

    @property
    def bottom_y(self) -> int:
        return HEADER_PX + self.height_u * U_PX

    @property
    def width(self) -> int:
        return 2 * MARGIN_PX + 2 * RAIL_PX + SLOT_WIDTH_PX

    @property
    def height(self) -> int:
        return self.bottom_y + self.footer_px

    def u_top_y(self, u: int) -> int:
        """y of the top edge of rack unit `u` (U1 is the lowest)."""
        return self.bottom_y - u * U_PX


# ---------------------------------------------------------------- parts


def header(site: Site, rack: Rack, frame: Frame) -> list[str]:
    subtitle = f"site {site.name}"
    if site.description:
        subtitle += f" · {site.description}"
    return [
        element("text", f"Rack {rack.name}", x=MARGIN_PX, y=24, class_="title", font_size=18, font_weight="bold", fill="#111827"),
        element("text", fit(subtitle, frame.width - 2 * MARGIN_PX, 12), x=MARGIN_PX, y=42, class_="subtitle", font_size=12, fill="#4b5563"),
    ]


def rails(frame: Frame) -> list[str]:
    return list(_rails(frame))


@lru_cache(maxsize=64)
def _rails(frame: Frame) -> tuple[str, ...]:
    """The rails and their U numbers depend on the frame alone: racks of one height share them."""
    left_x = MARGIN_PX
    right_x = frame.slot_x + SLOT_WIDTH_PX
    body = frame.height_u * U_PX
    parts = [
        element("rect", x=left_x, y=frame.top_y, width=RAIL_PX, height=body, fill="#e5e7eb", stroke="#6b7280"),
        element("rect", x=right_x, y=frame.top_y, width=RAIL_PX, height=body, fill="#e5e7eb", stroke="#6b7280"),
    ]
    for u in range(1, frame.height_u + 1):
        middle_y = frame.u_top_y(u) + U_PX / 2 + 4
        for side, rail_x in (("left", left_x), ("right", right_x)):
            parts.append(
                element("text", str(u), x=rail_x + RAIL_PX / 2, y=middle_y, class_="u-label", data_u=u,
                        data_side=side, font_size=10, text_anchor="middle", fill="#374151")
            )
    return tuple(parts)


def empty_slots(frame: Frame, occupied: dict[int, int]) -> list[str]:
    slots = _empty_slots(frame)
    return [slots[u - 1] for u in range(1, frame.height_u + 1) if u not in occupied]


@lru_cache(maxsize=64)
def _empty_slots(frame: Frame) -> tuple[str, ...]:
    """Every U of the frame drawn empty; a rack shows those no device occupies."""
    return tuple(
        element("rect", x=frame.slot_x, y=frame.u_top_y(u), width=SLOT_WIDTH_PX, height=U_PX,
                class_="slot-empty", data_u=u, fill="#f9fafb", stroke="#d1d5db", stroke_dasharray="3 3")
        for u in range(1, frame.height_u + 1)
    )


def host_list(device: Device) -> str:
    """The device's hosts; default names (`hci-7-n1`) shortened to what follows the device name."""
    prefix = f"{device.name}-"
    if all(name.startswith(prefix) for name in device.host_names):
        return ", ".join(name[len(prefix):] for name in device.host_names)
    return ", ".join(device.host_names)


def device_labels(device: Device) -> tuple[str, str]:
    """(primary, secondary): `name · hosts` and the block's display name."""
    primary = device.name
    if device.host_names != [device.name]:
        primary += " · " + host_list(device)
    return primary, device.block.display_name


@dataclass(frozen=True, slots=True)
class Box:
    """A device's rectangle, clipped to the rack so an overflowing device stays visible."""

    x: float
    y: float
    width: float
    height: float

    @classmethod
    def for_device(cls, device: Device, frame: Frame) -> Box:
        lowest_u = max(device.position_u, 1)
        highest_u = min(device.top_u, frame.height_u)
        height = max((highest_u - lowest_u + 1) * U_PX - 2, U_PX - 2)
        return cls(frame.slot_x + 2, frame.u_top_y(highest_u) + 1, SLOT_WIDTH_PX - 4, height)

    @property
    def middle_y(self) -> float:
        return self.y + self.height / 2


def device_box(device: Device, frame: Frame, power_basis: str, flagged: bool) -> str:
    """One device as a <g> carrying its U range in data- attributes; `flagged` outlines it red."""
    palette = CATEGORY_PALETTE.get(device.block.category, UNKNOWN_PALETTE)
    box = Box.for_device(device, frame)
    power = device_power_text(device.power_w(power_basis))
    parts = [
        f'<g class="device" data-device="{xml_text(device.name)}" data-block="{xml_text(device.block.name)}" '
        f'data-category="{xml_text(device.block.category)}" data-u-start="{device.position_u}" data-u-end="{device.top_u}">',
        element("title", f"{device.name} · {', '.join(device.host_names)} — {device.block.display_name} — "
                         f"U{device.position_u}-U{device.top_u}, {power}"),
        element("rect", x=box.x, y=box.y, width=box.width, height=box.height, rx=3, fill=palette.fill,
                fill_opacity=0.75 if flagged else None,
                stroke=POWER_COLOURS["red"] if flagged else palette.stroke, stroke_width=3 if flagged else 1),
        *device_texts(device, box, palette, power),
        "</g>",
    ]
    return "".join(parts)


def device_texts(device: Device, box: Box, palette: Palette, power: str) -> list[str]:
    """Labels on the left (one line for 1U, two lines above), power on the right."""
    primary, secondary = device_labels(device)
    text_x = box.x + 8
    text_width = box.width - 28 - len(power) * 11 * CHAR_WIDTH_EM
    if device.block.rack_units == 1:
        labels = [element("text", fit(f"{primary} · {secondary}", text_width, 11), x=text_x, y=box.middle_y + 4,
                          font_size=11, fill=palette.text, class_="device-label")]
    else:
        labels = [
            element("text", fit(primary, text_width, 12), x=text_x, y=box.middle_y - 2, font_size=12,
                    font_weight="bold", fill=palette.text, class_="device-label"),
            element("text", fit(secondary, text_width, 11), x=text_x, y=box.middle_y + 12, font_size=11,
                    fill=palette.text, class_="device-block"),
        ]
    labels.append(element("text", power, x=box.x + box.width - 8, y=box.middle_y + 4, font_size=11,
                           text_anchor="end", fill=palette.text, class_="device-power"))
    return labels


def footer(site: Site, rack: Rack, frame: Frame, figures: RackFigures) -> list[str]:
    percent = figures.power_percent(rack.power_budget_w)
    level = power_level(percent)
    colour = POWER_COLOURS[level]
    y = frame.bottom_y + 20
    power_text = (
        f"Power {kw(figures.power_w)} of {kw(rack.power_budget_w)} ({percent:.1f} %, {site.power_basis} basis)"
    )
    bar_width = SLOT_WIDTH_PX
    filled = min(percent, 100.0) / 100.0 * bar_width
    space_percent = 100.0 * figures.used_u / rack.height_u
    parts = [
        element("text", power_text, x=frame.slot_x, y=y, class_="power", data_level=level,
                data_power_w=figures.power_w, data_budget_w=rack.power_budget_w,
                font_size=12, font_weight="bold", fill=colour),
        element("rect", x=frame.slot_x, y=y + 6, width=bar_width, height=6, fill="#e5e7eb"),
        element("rect", x=frame.slot_x, y=y + 6, width=f"{filled:.1f}", height=6, fill=colour, class_="power-bar"),
        element("text", f"Space {figures.used_u}U of {rack.height_u}U used ({space_percent:.0f} %)",
                x=frame.slot_x, y=y + 30, class_="space", data_used_u=figures.used_u,
                data_height_u=rack.height_u, font_size=12, fill="#111827"),
    ]
    for row, problem in enumerate(placement_problems(rack, figures)):
        parts.append(element("text", fit(problem, SLOT_WIDTH_PX, 12), x=frame.slot_x, y=y + 74 + row * PROBLEM_ROW_PX,
                             class_="placement-problem", font_size=12, font_weight="bold", fill=POWER_COLOURS["red"]))
    parts.extend(legend(frame, y + 52))
    return parts


def legend(frame: Frame, y: float) -> list[str]:
    return list(_legend(frame, y))


@lru_cache(maxsize=64, typed=True)
def _legend(frame: Frame, y: float) -> tuple[str, ...]:
    parts = ['<g class="legend">']
    x = frame.slot_x
    for category, palette in CATEGORY_PALETTE.items():
        parts.append(element("rect", x=x, y=y - 10, width=12, height=12, rx=2, fill=palette.fill, stroke=palette.stroke))
        parts.append(element("text", category, x=x + 17, y=y, font_size=11, fill="#374151", data_category=category))
        x += 26 + len(category) * 11 * CHAR_WIDTH_EM + 14
    parts.append(element("rect", x=x, y=y - 10, width=12, height=12, fill="#f9fafb", stroke="#d1d5db", stroke_dasharray="3 3"))
    parts.append(element("text", "empty", x=x + 17, y=y, font_size=11, fill="#374151"))
    parts.append("</g>")
    return tuple(parts)


# ---------------------------------------------------------------- public API


def rack_svg(site: Site, rack: Rack) -> str:
    """The front elevation of one rack as SVG text."""
    figures = rack_figures(rack, site.power_basis)
    problem_count = len(placement_problems(rack, figures))
    frame = Frame(rack.height_u, FOOTER_PX + problem_count * PROBLEM_ROW_PX)
    devices = sorted(rack.devices, key=lambda device: (device.position_u, device.name))
    boxes = [device_box(device, frame, site.power_basis, is_misplaced(device, rack, figures)) for device in devices]
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{frame.width}" height="{frame.height}" '
        f'viewBox="0 0 {frame.width} {frame.height}" font-family="{FONT}" data-rack="{xml_text(rack.name)}" '
        f'data-site="{xml_text(site.name)}">',
        element("title", f"Rack {rack.name} ({site.name})"),
        element("rect", x=0, y=0, width=frame.width, height=frame.height, fill="#ffffff"),
        *header(site, rack, frame),
        *rails(frame),
        *empty_slots(frame, figures.occupied),
        *boxes,
        *footer(site, rack, frame, figures),
        "</svg>",
    ]
    return "\n".join(lines) + "\n"


def site_svgs(site: Site) -> dict[str, str]:
    """`<rack>.svg` -> SVG text, for every rack of the site, in design order."""
    return {f"{rack.name}.svg": rack_svg(site, rack) for rack in site.racks}
