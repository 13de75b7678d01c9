"""How a fabric check reads: text for people (mismatches grouped by link, both ends'
values under each) and JSON for machines (`--json`)."""

from __future__ import annotations

from dataclasses import asdict, is_dataclass

from rackform.fabric.check import SETTING_TITLES, UNREADABLE_SHOWN, FabricReport, Mismatch, value_text
from rackform.fabric.live import Unreadable


def _values_line(label: str, values: dict[str, object]) -> str:
    shown = " | ".join(f"{end} {value_text(value)}" for end, value in values.items())
    return f"      {label:<7} {shown}"


def _mismatch_lines(mismatch: Mismatch) -> list[str]:
    title = SETTING_TITLES.get(mismatch.setting, mismatch.setting)
    lines = [f"  {title} ({mismatch.kind}): {mismatch.message}"]
    if mismatch.design:
        lines.append(_values_line("design", mismatch.design))
    if mismatch.live:
        lines.append(_values_line("live", mismatch.live))
    return lines


def _unreadable_lines(report: FabricReport) -> list[str]:
    lines = []
    for (reason, settings), endpoints in report.unreadable.items():
        names = ", ".join(SETTING_TITLES.get(setting, setting) for setting in settings)
        shown = ", ".join(endpoints[:UNREADABLE_SHOWN])
        more = f" and {len(endpoints) - UNREADABLE_SHOWN} more" if len(endpoints) > UNREADABLE_SHOWN else ""
        lines.append(f"{Unreadable(reason)}: {names} at {shown}{more}")
    return lines


def text_report(report: FabricReport) -> str:
    scope = "design only" if report.live_source is None else \
        f"design and live ({report.live_source}: {report.devices_read} device(s) read)"
    lines = [f"fabric check {report.site}: {scope}"]
    by_link: dict[str, list[Mismatch]] = {}
    for mismatch in report.mismatches:
        by_link.setdefault(mismatch.link, []).append(mismatch)
    for link, mismatches in by_link.items():
        lines.append(link)
        for mismatch in mismatches:
            lines += _mismatch_lines(mismatch)
    lines += _unreadable_lines(report)
    if report.ok:
        lines.append(f"{report.site}: clean: the two ends of all {report.links_checked} fabric link(s) agree "
                     f"with each other and with the design")
    else:
        lines.append(f"{report.site}: {len(report.mismatches)} mismatch(es) on {report.links_with_mismatches()} "
                     f"link(s) or device(s); {report.links_checked} fabric link(s) checked")
    return "\n".join(lines)


def json_value(value: object) -> object:
    """Values as JSON: lists for tuples, {"not_readable": reason} for what cannot be read."""
    if isinstance(value, Unreadable):
        return {"not_readable": value.reason}
    if is_dataclass(value):
        return asdict(value)
    if isinstance(value, tuple):
        return [json_value(item) for item in value]
    return value


def json_report(report: FabricReport) -> dict:
    return {
        "site": report.site,
        "ok": report.ok,
        "live": report.live_source,
        "links_checked": report.links_checked,
        "devices_read": report.devices_read,
        "mismatches": [
            {
                "link": mismatch.link,
                "setting": mismatch.setting,
                "kind": mismatch.kind,
                "message": mismatch.message,
                "design": {end: json_value(value) for end, value in mismatch.design.items()},
                "live": {end: json_value(value) for end, value in mismatch.live.items()},
            }
            for mismatch in report.mismatches
        ],
        "not_readable": [
            {"reason": reason, "settings": list(settings), "endpoints": endpoints}
            for (reason, settings), endpoints in report.unreadable.items()
        ],
    }
