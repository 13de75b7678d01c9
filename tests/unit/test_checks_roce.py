"""Lossless RoCE checks: switch and host agree with the design and with each other."""

from __future__ import annotations

import pytest

from rackform.checks.cabling import leaf_links
from rackform.checks.roce import (
    L2_OVERHEAD_B,
    host_settings,
    link_settings,
    roce_cnp_priority,
    roce_dscp_map,
    roce_ecn,
    roce_host_tos,
    roce_mtu,
    roce_overrides_apply,
    roce_pfc_agreement,
    roce_pfc_priorities,
    roce_trust,
    switch_settings,
)
from rackform.model.schema import RoceOverrides

ROCE_CHECKS = [
    roce_pfc_priorities, roce_pfc_agreement, roce_dscp_map, roce_host_tos,
    roce_trust, roce_ecn, roce_cnp_priority, roce_mtu, roce_overrides_apply,
]
ROCE_PROFILE = "topologies/profiles/roce.yaml"
"""Where the lab's fabric settings live (the site extends the profile); edits go there."""
SWITCH_PFC = "    pfc_priorities: [3]\n    dscp_to_priority"
HOST_PFC = "    pfc_priorities: [3]\n    roce_tos"
LEAF_1 = "switch: {role: leaf, os: cumulus, fabric: compute, asn: 65101}"
GPU_1 = "{name: gpu-1, block: dgx-h100, position_u: 7}"


def set_at(lab_files, loc) -> str:
    """The text of the line a finding points at."""
    assert loc.path == ROCE_PROFILE, loc
    return lab_files.read(loc.path).splitlines()[loc.line - 1]


def override_leaf_1(lab_files, overrides: str) -> None:
    lab_files.edit_site(LEAF_1, f"{LEAF_1}\n        roce_overrides: {overrides}")


def override_gpu_1(lab_files, overrides: str) -> None:
    lab_files.edit_site(GPU_1, GPU_1[:-1] + f", roce_overrides: {overrides}}}")


@pytest.mark.parametrize("roce_check", ROCE_CHECKS)
def test_lab_fabric_is_consistent(lab_site, roce_check):
    assert list(roce_check(lab_site)) == []


# ---------------------------------------------------------------- effective settings


def test_effective_settings_without_overrides_are_the_sites(lab_site):
    switch, host = switch_settings(lab_site.fabric), host_settings(lab_site.fabric)

    assert (switch.trust, switch.pfc_priorities, dict(switch.dscp_to_priority), switch.mtu) == ("dscp", (3,), {26: 3, 48: 6}, 9216)
    assert (host.pfc_priorities, host.roce_tos, host.ecn, host.mtu) == ((3,), 106, True, 9000)


def test_effective_settings_apply_only_the_overridden_fields(lab_site):
    overrides = RoceOverrides(mtu=4200, ecn=False)

    switch, host = switch_settings(lab_site.fabric, overrides), host_settings(lab_site.fabric, overrides)

    assert (switch.mtu, switch.ecn, switch.trust) == (4200, False, "dscp")
    assert (host.mtu, host.ecn, host.roce_tos) == (4200, False, 106)


# ---------------------------------------------------------------- site-level mistakes


def test_host_pfc_on_another_priority_is_an_error(lab_files):
    lab_files.edit(ROCE_PROFILE, HOST_PFC, HOST_PFC.replace("[3]", "[4]"))
    site = lab_files.load()

    [finding] = roce_pfc_priorities(site)

    assert finding.key == "fabric.host.pfc_priorities"
    assert set_at(lab_files, finding.loc) == "    pfc_priorities: [4]"  # the line that set it, in the profile
    assert "host PFC priorities [4] (switch [3], host [4])" in finding.message
    assert "not lossless" in finding.message


def test_host_and_switch_pfc_disagreeing_is_an_error(lab_files):
    lab_files.edit(ROCE_PROFILE, HOST_PFC, HOST_PFC.replace("[3]", "[4]"))

    [finding] = roce_pfc_agreement(lab_files.load())

    assert "host PFC priorities [4] differ from switch PFC priorities [3]" in finding.message


def test_pfc_on_an_extra_priority_is_an_error(lab_files):
    lab_files.edit(ROCE_PROFILE, SWITCH_PFC, SWITCH_PFC.replace("[3]", "[3, 4]"))

    [finding] = roce_pfc_priorities(lab_files.load())

    assert finding.key == "fabric.switch.pfc_priorities"
    assert "extra lossless priorities [4]" in finding.message


def test_dscp_map_without_the_roce_dscp_is_an_error(lab_files):
    lab_files.edit(ROCE_PROFILE, "dscp_to_priority: {26: 3, 48: 6}", "dscp_to_priority: {48: 6}")

    [finding] = roce_dscp_map(lab_files.load())

    assert finding.key == "fabric.switch.dscp_to_priority"
    assert "maps DSCP 26 to nothing; RoCE traffic needs DSCP 26 -> priority 3" in finding.message


def test_dscp_map_sending_cnp_elsewhere_is_an_error(lab_files):
    lab_files.edit(ROCE_PROFILE, "dscp_to_priority: {26: 3, 48: 6}", "dscp_to_priority: {26: 3, 48: 5}")

    [finding] = roce_dscp_map(lab_files.load())

    assert "maps DSCP 48 to priority 5; CNP traffic needs DSCP 48 -> priority 6" in finding.message


def test_host_tos_with_the_wrong_dscp_is_an_error(lab_files):
    lab_files.edit(ROCE_PROFILE, "roce_tos: 106", "roce_tos: 98")

    [finding] = roce_host_tos(lab_files.load())

    assert finding.key == "fabric.host.roce_tos"
    assert "roce_tos 98 marks DSCP 24, but the RoCE DSCP is 26" in finding.message
    assert "use roce_tos 106" in finding.message


def test_trust_mismatch_is_an_error(lab_files):
    lab_files.edit(ROCE_PROFILE, "  host:\n    trust: dscp", "  host:\n    trust: pcp")

    [finding] = roce_trust(lab_files.load())

    assert finding.key == "fabric.host.trust" and "host trusts pcp but switch trusts dscp" in finding.message


def test_ecn_on_one_side_only_is_an_error(lab_files):
    lab_files.edit(ROCE_PROFILE, "    ecn: true\n    mtu: 9000", "    ecn: false\n    mtu: 9000")

    [finding] = roce_ecn(lab_files.load())

    assert finding.key == "fabric.host.ecn"
    assert "ECN is disabled on the host but enabled on the switch" in finding.message


def test_ecn_thresholds_out_of_order_are_an_error(lab_files):
    lab_files.edit(ROCE_PROFILE, "min_kb: 150, max_kb: 1500", "min_kb: 1500, max_kb: 150")

    [finding] = roce_ecn(lab_files.load())

    assert finding.key == "fabric.switch.ecn.min_kb" and "min_kb 1500 is not below max_kb 150" in finding.message


def test_cnp_on_the_roce_priority_is_an_error(lab_files):
    lab_files.edit(ROCE_PROFILE, "cnp_priority: 6", "cnp_priority: 3")

    [finding] = roce_cnp_priority(lab_files.load())

    assert finding.key == "fabric.roce.cnp_priority" and "CNP priority 3 is the RoCE priority" in finding.message


def test_pfc_on_the_cnp_priority_is_an_error(lab_files):
    lab_files.edit(ROCE_PROFILE, SWITCH_PFC, SWITCH_PFC.replace("[3]", "[3, 6]"))

    [finding] = roce_cnp_priority(lab_files.load())

    assert finding.key == "fabric.switch.pfc_priorities" and "include the CNP priority 6" in finding.message


def test_host_mtu_above_switch_mtu_minus_l2_overhead_is_an_error(lab_files):
    lab_files.edit(ROCE_PROFILE, "mtu: 9216", "mtu: 9000")
    site = lab_files.load()

    [finding] = roce_mtu(site)

    assert finding.key == "fabric.host.mtu" and set_at(lab_files, finding.loc) == "    mtu: 9000"
    assert "host MTU 9000 + 22 B of L2 overhead = 9022 B exceeds the switch MTU 9000" in finding.message


@pytest.mark.parametrize(("host_mtu", "errors"), [(9216 - L2_OVERHEAD_B, 0), (9216 - L2_OVERHEAD_B + 1, 1)])
def test_host_mtu_may_reach_exactly_switch_mtu_minus_overhead(lab_files, host_mtu, errors):
    lab_files.edit(ROCE_PROFILE, "mtu: 9000", f"mtu: {host_mtu}")

    assert len(list(roce_mtu(lab_files.load()))) == errors


# ---------------------------------------------------------------- per-link overrides


def test_switch_override_is_reported_per_link_at_the_switch(lab_files):
    override_leaf_1(lab_files, "{mtu: 9000}")
    site = lab_files.load()

    findings = list(roce_mtu(site))

    assert len(findings) == 6  # every host on leaf-1
    assert {f.key for f in findings} == {"racks[r1].devices[leaf-1].roce_overrides.mtu"}
    assert {f.loc for f in findings} == {site.switches["leaf-1"].loc}
    assert findings[4].message.startswith("link gpu-1:fab0 - leaf-1:swp5: host MTU 9000")


def test_host_override_is_reported_on_that_hosts_links_only(lab_files):
    override_gpu_1(lab_files, "{pfc_priorities: [3, 4]}")
    site = lab_files.load()

    findings = list(roce_pfc_priorities(site))

    assert [f.message.split(": ")[0] for f in findings] == ["link gpu-1:fab0 - leaf-1:swp5", "link gpu-1:fab1 - leaf-2:swp5"]
    assert {f.key for f in findings} == {"racks[r1].devices[gpu-1].roce_overrides.pfc_priorities"}
    assert "(switch [3], host [3, 4])" in findings[0].message


def test_site_level_mistake_is_reported_once_despite_unrelated_overrides(lab_files):
    lab_files.edit(ROCE_PROFILE, "mtu: 9216", "mtu: 9000")
    override_leaf_1(lab_files, "{trust: dscp}")

    findings = list(roce_mtu(lab_files.load()))

    assert [f.key for f in findings] == ["fabric.host.mtu"]


def test_override_repairing_a_link_adds_no_finding(lab_files):
    lab_files.edit(ROCE_PROFILE, "mtu: 9216", "mtu: 9000")
    override_gpu_1(lab_files, "{mtu: 8900}")

    findings = list(roce_mtu(lab_files.load()))

    assert [f.key for f in findings] == ["fabric.host.mtu"]


def test_override_that_has_no_effect_warns(lab_files):
    override_leaf_1(lab_files, "{roce_tos: 106}")

    [finding] = roce_overrides_apply(lab_files.load())

    assert finding.severity == "warning"
    assert finding.key == "racks[r1].devices[leaf-1].roce_overrides.roce_tos"


def test_link_settings_apply_each_ends_own_overrides(lab_files):
    override_leaf_1(lab_files, "{mtu: 9100}")
    override_gpu_1(lab_files, "{mtu: 4000}")
    site = lab_files.load()
    link = next(link for link in leaf_links(site) if str(link) == "gpu-1:fab0 - leaf-1:swp5")

    host, switch = link_settings(site.fabric, link)

    assert (host.mtu, switch.mtu) == (4000, 9100)
