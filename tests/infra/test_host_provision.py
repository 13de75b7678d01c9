"""Stage provision (role bmc_reachable) on the servers: each server answered and
recorded its BMC as a local fact, as the inventory gives it."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.stage("provision"), pytest.mark.machines("servers")]

ROLE = "bmc_reachable"
FACT_FILE = "rackform_bmc.fact"


def test_bmc_recorded_as_local_fact(host, machine_vars, role_setting):
    path = f"{role_setting(ROLE, 'bmc_reachable_facts_dir')}/{FACT_FILE}"
    fact = host.file(path)
    assert fact.exists, f"{path} is missing"
    recorded = json.loads(fact.content_string)
    wanted = {"bmc_address": machine_vars["bmc_address"], "bmc_mac": machine_vars.get("bmc_mac"),
              "serial_number": machine_vars.get("serial_number")}
    assert recorded == wanted, f"{path} records {recorded}, the inventory says {wanted}"
