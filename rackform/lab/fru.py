"""The FRU inventory a simulated BMC serves: a common header and a product info area
(Platform Management FRU Information Storage Definition v1.3, sections 8 and 11).

Real BMCs carry the chassis' manufacturer, product name and serial number in FRU device 0;
`rackform discover` and `bmc status` read them back (decoding is pyghmi's). The lab's
ipmi_sim BMCs and the in-process fake BMC serve this image so that path runs for real.
"""

from __future__ import annotations

from rackform.ipmi import prelogin

ENGLISH = 0x19  # language code 25: English, which makes every field 8-bit ASCII (section 15)
END_OF_FIELDS = 0xC1
FORMAT_VERSION = 0x01
AREA_MULTIPLE_BYTES = 8
MAX_FIELD_BYTES = 63  # a type/length byte holds 6 bits of length


def _field(text: str) -> bytes:
    encoded = text.encode("ascii", errors="replace")[:MAX_FIELD_BYTES]
    return bytes((0xC0 | len(encoded),)) + encoded  # type 11b: 8-bit ASCII + Latin 1


def fru_area(manufacturer: str, product: str, serial: str) -> bytes:
    """A FRU image whose product area names the manufacturer, product and serial number."""
    # Product area fields in order: manufacturer, product name, part/model, version, serial, asset tag, FRU file id.
    body = bytes((FORMAT_VERSION, 0x00, ENGLISH)) + b"".join(
        _field(text) for text in (manufacturer, product, "", "", serial, "", ""))
    body += bytes((END_OF_FIELDS,))
    body += bytes(-(len(body) + 1) % AREA_MULTIPLE_BYTES)  # pad so the area plus its checksum fills 8-byte units
    product_area = bytearray(body)
    product_area[1] = (len(body) + 1) // AREA_MULTIPLE_BYTES
    product_area += bytes((prelogin.checksum(bytes(product_area)),))
    # Common header: version, then offsets (in 8 bytes) of the internal, chassis, board, product and
    # multi-record areas; only the product area (right after the header, at 1) is present.
    header = bytearray((FORMAT_VERSION, 0, 0, 0, 1, 0, 0))
    header += bytes((prelogin.checksum(bytes(header)),))
    return bytes(header) + bytes(product_area)
