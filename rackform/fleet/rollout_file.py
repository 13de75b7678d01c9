"""topologies/rollout.yaml: the order in which the sites of a repo are deployed.

    waves:                       # in order; a wave starts when every site of the one before passed
      - name: canary
        sites: [lab]
      - name: edge
        sites: [edge]
        parallel: 2              # sites of this wave deployed at once (default 1)
        gates: [verify]          # this wave's gates instead of the default
    gates: [verify, fabric-check]  # what each site must pass before the next wave (default: both)
    routed:                      # groups of sites whose management and out-of-band networks
      - [lab, edge]              # route to each other: their addresses must not collide

Errors are `file:line: key: message`, like every other input (rackform.model.source).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rackform.model.loader import parse
from rackform.model.source import BadInput, Loc, SourceError, display_path, load_yaml

ROLLOUT_FILE = Path("topologies") / "rollout.yaml"
GATES = ("verify", "fabric-check")
"""verify: the testinfra host checks (`rackform verify`) pass; fabric-check: the live fabric
check (`rackform fabric check`) finds no mismatch."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WaveSpec(_Model):
    name: str = Field(min_length=1)
    sites: list[str] = Field(min_length=1)
    parallel: int = Field(default=1, ge=1)
    gates: list[str] | None = None


class RolloutSpec(_Model):
    waves: list[WaveSpec] = Field(min_length=1)
    gates: list[str] = list(GATES)
    routed: list[list[str]] = []


@dataclass(frozen=True, slots=True)
class Wave:
    name: str
    sites: tuple[str, ...]
    parallel: int
    gates: tuple[str, ...]
    loc: Loc


@dataclass(frozen=True, slots=True)
class Rollout:
    path: Path
    waves: tuple[Wave, ...]
    routed: tuple[tuple[str, ...], ...]
    site_locs: dict[str, Loc]
    """Where each site is named in the file (for errors about it)."""

    @property
    def sites(self) -> list[str]:
        return [site for wave in self.waves for site in wave.sites]

    def wave_of(self, site: str) -> Wave:
        return next(wave for wave in self.waves if site in wave.sites)


def load_rollout(root: Path, path: Path | None = None) -> Rollout:
    """Read and check the rollout file; BadInput naming file:line for every problem."""
    root = Path(root)
    path = Path(path) if path is not None else root / ROLLOUT_FILE
    shown = display_path(path, root)
    try:
        raw = load_yaml(path, shown_as=shown)
    except SourceError as error:
        raise BadInput([error]) from None
    spec: RolloutSpec = parse(RolloutSpec, raw, Loc(shown, 1))
    known = sorted(site.stem for site in (root / "topologies" / "sites").glob("*.yaml"))
    errors: list[SourceError] = []
    site_locs: dict[str, Loc] = {}
    waves = []
    for index, (wave, raw_wave) in enumerate(zip(spec.waves, raw["waves"])):
        sites_raw = raw_wave["sites"]
        for position, site in enumerate(wave.sites):
            loc = sites_raw.item_loc(position)
            key = f"waves[{wave.name}].sites"
            if site in site_locs:
                errors.append(SourceError(loc, key, f"site '{site}' is already in a wave (at line "
                                                   f"{site_locs[site].line}); a site is deployed once per rollout"))
            elif site not in known:
                errors.append(SourceError(loc, key, f"unknown site '{site}'{_hint(site, known)}; "
                                                   f"sites are topologies/sites/*.yaml"))
            site_locs.setdefault(site, loc)
        gates = tuple(wave.gates if wave.gates is not None else spec.gates)
        gate_loc = raw_wave.key_loc("gates") if wave.gates is not None else raw.key_loc("gates")
        errors += _gate_errors(gates, gate_loc, f"waves[{wave.name}].gates" if wave.gates is not None else "gates")
        waves.append(Wave(wave.name, tuple(wave.sites), wave.parallel, gates, raw_wave.loc))
        if wave.name in [other.name for other in spec.waves[:index]]:
            errors.append(SourceError(raw_wave.loc, "waves.name", f"wave name '{wave.name}' is used twice"))
    for group_index, group in enumerate(spec.routed):
        loc = raw["routed"].item_loc(group_index)
        errors += [SourceError(loc, "routed", f"site '{site}' is in no wave") for site in group if site not in site_locs]
    if errors:
        raise BadInput(errors)
    return Rollout(path, tuple(waves), tuple(tuple(group) for group in spec.routed), site_locs)


def _gate_errors(gates: tuple[str, ...], loc: Loc, key: str) -> list[SourceError]:
    return [SourceError(loc, key, f"unknown gate '{gate}'{_hint(gate, GATES)}; gates are {', '.join(GATES)}")
            for gate in gates if gate not in GATES]


def _hint(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


__all__ = ["Rollout", "Wave", "load_rollout", "ROLLOUT_FILE", "GATES"]
