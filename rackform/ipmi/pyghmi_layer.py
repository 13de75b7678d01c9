"""pyghmi's command layer (SDR sensors, FRU decoding, boot options) on a rackform LanSession.

pyghmi.Command's constructor would log in through pyghmi's own session machinery (one
shared I/O thread for the whole process: too slow for a fleet, see rackform.ipmi.session);
`PyghmiCommand` sets the same attributes and hands pyghmi our session, whose `raw_command`
has pyghmi's signature. tests/unit/test_ipmi_client.py checks against pyghmi's source that
every attribute its constructor sets is set here too, so an upgrade that adds one fails
there rather than in the field.
"""

from __future__ import annotations

from pyghmi import exceptions as pyghmi_exceptions
from pyghmi.ipmi import command as pyghmi_command
from pyghmi.ipmi import fru as pyghmi_fru

from rackform.ipmi.session import LanSession


class PyghmiCommand(pyghmi_command.Command):
    """pyghmi's Command whose session is ours (see the module docstring)."""

    def __init__(self, session: LanSession):  # noqa: D107 - deliberately no super().__init__()
        self.onlogon = None
        self.bmc = session.address
        self._sdrcachedir = None
        self._sdr = None
        self._oem = None
        self._oemknown = False
        self._netchannel = None
        self._ipv6support = None
        self.certverify = None
        self.kwargs = {}
        self.ipmi_session = session


def decode_fru(image: bytes) -> dict | None:
    """pyghmi's decoding of a raw FRU image (chassis, board and product areas)."""
    try:
        return pyghmi_fru.FRU(rawdata=bytearray(image)).info
    except pyghmi_exceptions.PyghmiException as error:
        raise ValueError(str(error)) from None
