"""The FRU inventory the lab's BMCs serve (rackform.lab.fru): valid per the FRU spec, decoded
by pyghmi (what `discover` and `bmc status` use) to the host's inventory serial."""

from __future__ import annotations

import dataclasses
import re

from rackform.ipmi import prelogin
from rackform.ipmi.pyghmi_layer import decode_fru
from rackform.lab import bmc
from rackform.lab.fru import fru_area
from rackform.model.loader import load_site
from rackform.paths import ASSETS_ROOT


def test_header_and_product_area_checksums_hold():
    image = fru_area("Acme", "X1", "SN1")
    area = image[8:8 + image[9] * 8]
    assert (prelogin.checksum(image[:7]), sum(area) % 256) == (image[7], 0)


def test_pyghmi_reads_back_manufacturer_product_and_serial():
    info = decode_fru(fru_area("NVIDIA", "NVIDIA DGX H100", "1660223000042"))
    assert (info["Manufacturer"], info["Product name"], info["Serial Number"]) == (
        "NVIDIA", "NVIDIA DGX H100", "1660223000042")


def test_a_lab_bmc_serves_its_hosts_inventory_serial():
    site = load_site("lab", ASSETS_ROOT)
    commands = bmc.render_emulator_commands("lab", site.hosts["gpu-1"])
    line = next(line for line in commands.splitlines() if line.startswith("mc_add_fru_data"))
    size, data = re.fullmatch(r"mc_add_fru_data 0x20 0x00 (0x[0-9a-f]+) data((?: 0x[0-9a-f]{2})+)", line).groups()
    image = bytes(int(byte, 16) for byte in data.split())
    info = decode_fru(image)
    assert (int(size, 16), info["Serial Number"], info["Manufacturer"]) == (len(image), "LAB-GPU-1", "NVIDIA")


def test_a_host_without_a_serial_still_gets_one():
    site = load_site("lab", ASSETS_ROOT)
    host = dataclasses.replace(site.hosts["mgmt-1"], serial=None)
    assert bmc.host_fru("lab", host).serial == "LAB-MGMT-1"
