"""What a preflight check reports: one `Finding` per problem, tied to a file and line."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from rackform.model.source import Loc

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    """Name of the check function that found it (e.g. `rack_power`)."""
    severity: Severity
    loc: Loc
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.loc}: {self.severity}: {self.key}: {self.message} [{self.check}]"

    def as_dict(self) -> dict:
        data = asdict(self)
        data["file"], data["line"] = self.loc.path, self.loc.line
        del data["loc"]
        return data
