"""Shared settings: fleet defaults < profiles (in `extends:` order) < site, each value with its origin."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rackform.checks.roce import roce_mtu
from rackform.cli import main
from rackform.k8s.versions import load_matrix
from rackform.model import schema
from rackform.model.layers import BUILT_IN, merge, origin_lines
from rackform.model.source import BadInput, Loc, load_yaml

DEFAULTS = "topologies/defaults.yaml"
ROCE = "topologies/profiles/roce.yaml"
KUBERNETES = "topologies/profiles/kubernetes.yaml"
LAB = "topologies/sites/lab.yaml"
EXTENDS = "extends: [roce, kubernetes]"


def line_of(lab_files, path: str, text: str) -> Loc:
    """The Loc of the one line of `path` that holds `text`."""
    lines = [n for n, line in enumerate(lab_files.read(path).splitlines(), 1) if text in line]
    assert len(lines) == 1, (path, text, lines)
    return Loc(path, lines[0])


def add_to_site(lab_files, text: str) -> None:
    lab_files.edit(LAB, EXTENDS + "\n", EXTENDS + "\n" + text)


# ---------------------------------------------------------------- where each value comes from


def test_each_layer_supplies_its_values_with_their_lines(lab_files):
    site = lab_files.load()

    assert site.origins["fabric.no_single_point_of_failure"] == line_of(lab_files, DEFAULTS, "no_single_point_of_failure")
    assert site.origins["fabric.switch.mtu"] == line_of(lab_files, ROCE, "mtu: 9216")
    assert site.origins["kubernetes.cni"] == line_of(lab_files, KUBERNETES, "cni: kube-router")
    assert site.origins["kubernetes.control_plane"] == line_of(lab_files, LAB, "control_plane:")
    assert (site.fabric.switch.mtu, site.fabric.no_single_point_of_failure, site.kubernetes.cni) == (9216, True, "kube-router")


def test_a_value_no_file_sets_is_the_built_in_default(lab_files):
    text = lab_files.read(DEFAULTS)
    lab_files.write(DEFAULTS, text[: text.index("provisioning:")])

    site = lab_files.load()

    assert site.provisioning.max_fail_percentage == 25
    assert "provisioning.max_fail_percentage" not in site.origins
    [line] = [line for line in origin_lines(site) if line.startswith("provisioning.max_fail_percentage")]
    assert line.endswith(BUILT_IN)


def test_kubernetes_version_defaults_from_the_version_matrix(lab_files, capsys):
    lab_files.pin_lab_kubernetes(None)  # the shipped lab pins one patch behind the default
    matrix = load_matrix(lab_files.root)
    site = lab_files.load()

    assert site.kubernetes.version == matrix.kubernetes_default
    assert site.origins["kubernetes.version"] == matrix.kubernetes_default_loc
    assert matrix.kubernetes_default_loc == line_of(lab_files, "topologies/versions.yaml", f'default: "{matrix.kubernetes_default}"')
    assert main(["validate", "lab", "--root", str(lab_files.root), "--show-origin"]) == 0
    assert re.search(rf"^kubernetes\.version = {re.escape(matrix.kubernetes_default)} +"
                     rf"{re.escape(str(matrix.kubernetes_default_loc))}$", capsys.readouterr().out, re.M)


def test_a_site_pinning_kubernetes_version_wins_over_the_matrix(lab_site, lab_files):
    assert (lab_site.kubernetes.version, load_matrix(lab_files.root).kubernetes_default) == ("1.36.1", "1.36.3")
    assert lab_site.origins["kubernetes.version"] == line_of(lab_files, LAB, 'version: "1.36.1"')

    lab_files.pin_lab_kubernetes("1.30.2")
    site = lab_files.load()

    assert site.kubernetes.version == "1.30.2"
    assert site.origins["kubernetes.version"] == line_of(lab_files, LAB, 'version: "1.30.2"')


# ---------------------------------------------------------------- precedence and merging


def test_site_beats_profile_beats_defaults_key_by_key(lab_files):
    lab_files.edit(DEFAULTS, "  no_single_point_of_failure: true\n",
                   "  no_single_point_of_failure: true\n  host: {mtu: 8000, roce_tos: 106}\n")
    first = lab_files.load()
    assert first.fabric.host.mtu == 9000 and first.origins["fabric.host.mtu"] == line_of(lab_files, ROCE, "mtu: 9000")

    add_to_site(lab_files, "fabric:\n  host: {mtu: 8500}\n")
    site = lab_files.load()

    assert site.fabric.host.mtu == 8500
    assert site.origins["fabric.host.mtu"] == line_of(lab_files, LAB, "mtu: 8500")
    # the site set one key of fabric.host: the others still come from the profile and the defaults
    assert site.fabric.host.ecn is True and site.origins["fabric.host.ecn"].path == ROCE
    assert site.origins["fabric.no_single_point_of_failure"].path == DEFAULTS


def test_a_later_profile_wins_over_an_earlier_one(lab_files):
    lab_files.write("topologies/profiles/jumbo.yaml", "fabric:\n  switch:\n    mtu: 9100\n")

    lab_files.edit(LAB, EXTENDS, "extends: [roce, kubernetes, jumbo]")
    assert (lab_files.load().fabric.switch.mtu, lab_files.load().origins["fabric.switch.mtu"]) == (
        9100, Loc("topologies/profiles/jumbo.yaml", 3))

    lab_files.edit(LAB, "extends: [roce, kubernetes, jumbo]", "extends: [jumbo, roce, kubernetes]")
    assert lab_files.load().fabric.switch.mtu == 9216


def test_a_profile_may_extend_another(lab_files):
    lab_files.write("topologies/profiles/roce-400g.yaml", "extends: [roce]\nfabric:\n  switch:\n    mtu: 9100\n")
    lab_files.edit(LAB, EXTENDS, "extends: [roce-400g, kubernetes]")

    site = lab_files.load()

    assert site.fabric.switch.mtu == 9100 and site.origins["fabric.switch.mtu"].path == "topologies/profiles/roce-400g.yaml"
    assert site.fabric.switch.trust == "dscp" and site.origins["fabric.switch.trust"].path == ROCE


def test_lists_replace_instead_of_appending(lab_files):
    add_to_site(lab_files, "fabric:\n  switch:\n    pfc_priorities: [4]\n")

    site = lab_files.load()

    assert site.fabric.switch.pfc_priorities == [4]
    assert site.origins["fabric.switch.pfc_priorities"] == line_of(lab_files, LAB, "pfc_priorities: [4]")


def test_a_dscp_map_replaces_whole_so_a_site_can_drop_an_entry(lab_files):
    add_to_site(lab_files, "fabric:\n  switch:\n    dscp_to_priority: {26: 3}\n")

    assert lab_files.load().fabric.switch.dscp_to_priority == {26: 3}


def test_merge_keeps_the_origin_of_every_key(tmp_path: Path):
    (tmp_path / "low.yaml").write_text("fabric:\n  host:\n    mtu: 9000\n    ecn: true\n")
    (tmp_path / "high.yaml").write_text("fabric:\n  host:\n    mtu: 4200\n")
    low, high = load_yaml(tmp_path / "low.yaml", shown_as="low"), load_yaml(tmp_path / "high.yaml", shown_as="high")

    merged = merge(low, high, schema.SiteFile)

    host = merged["fabric"]["host"]
    assert dict(host) == {"mtu": 4200, "ecn": True}
    assert (host.key_loc("mtu"), host.key_loc("ecn")) == (Loc("high", 3), Loc("low", 4))


# ---------------------------------------------------------------- errors point at the line that set the value


def test_a_schema_error_in_the_defaults_is_reported_at_the_defaults_line(lab_files):
    lab_files.edit(DEFAULTS, "max_fail_percentage: 25", "max_fail_percentage: 150")

    with pytest.raises(BadInput) as caught:
        lab_files.load()

    [error] = caught.value.errors
    assert (error.loc, error.key) == (line_of(lab_files, DEFAULTS, "max_fail_percentage: 150"), "provisioning.max_fail_percentage")


def test_a_check_rejecting_a_defaults_value_points_at_the_defaults_line(lab_files):
    lab_files.edit(ROCE, "    ecn: true\n    mtu: 9000\n", "    ecn: true\n")
    lab_files.edit(DEFAULTS, "  no_single_point_of_failure: true\n", "  no_single_point_of_failure: true\n  host:\n    mtu: 9216\n")

    [finding] = roce_mtu(lab_files.load())

    assert (finding.key, finding.loc) == ("fabric.host.mtu", line_of(lab_files, DEFAULTS, "mtu: 9216"))


def test_an_unknown_profile_is_an_error_with_a_suggestion(lab_files):
    lab_files.edit(LAB, EXTENDS, "extends: [rcoe, kubernetes]")

    with pytest.raises(BadInput) as caught:
        lab_files.load()

    [error] = caught.value.errors
    assert error.loc == line_of(lab_files, LAB, "extends:")
    assert "unknown profile 'rcoe' (did you mean 'roce'?); profiles: kubernetes, roce" in error.message


def test_profiles_extending_each_other_in_a_cycle_are_an_error(lab_files):
    lab_files.write("topologies/profiles/a.yaml", "extends: [b]\n")
    lab_files.write("topologies/profiles/b.yaml", "extends: [a]\n")
    lab_files.edit(LAB, EXTENDS, "extends: [roce, kubernetes, a]")

    with pytest.raises(BadInput) as caught:
        lab_files.load()

    assert [(str(e.loc), e.message) for e in caught.value.errors] == [
        ("topologies/profiles/b.yaml:1", "profile cycle: a -> b -> a")]


def test_an_unknown_key_in_a_profile_is_an_error_with_a_suggestion(lab_files):
    lab_files.edit(KUBERNETES, "  cni: kube-router", "  cnii: kube-router")

    with pytest.raises(BadInput) as caught:
        lab_files.load()

    [error] = caught.value.errors
    assert (error.loc, error.key) == (line_of(lab_files, KUBERNETES, "cnii"), "kubernetes.cnii")
    assert error.message.startswith("unknown key (did you mean 'cni'?)")


def test_a_profile_reached_twice_applies_once(lab_files):
    lab_files.write("topologies/profiles/jumbo.yaml", "extends: [roce]\nfabric:\n  switch:\n    mtu: 9100\n")
    lab_files.edit(LAB, EXTENDS, "extends: [jumbo, roce, kubernetes]")

    # roce came in through jumbo, first: naming it again does not put it above jumbo
    assert lab_files.load().fabric.switch.mtu == 9100


# ---------------------------------------------------------------- --show-origin


def test_show_origin_prints_every_setting_with_its_file_and_line(lab_files, capsys):
    code = main(["validate", "lab", "--root", str(lab_files.root), "--show-origin"])
    out = capsys.readouterr().out

    assert code == 0
    shown = {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(r"^(\S+) = (.*?) +(\S+)$", out, re.M)}
    assert shown["fabric.switch.mtu"] == ("9216", str(line_of(lab_files, ROCE, "mtu: 9216")))
    assert shown["fabric.no_single_point_of_failure"] == ("true", str(line_of(lab_files, DEFAULTS, "no_single")))
    assert shown["kubernetes.control_plane"] == ("[mgmt-1, mgmt-2, mgmt-3]", str(line_of(lab_files, LAB, "control_plane")))
    assert shown["kubernetes.version"] == ("1.36.1", str(line_of(lab_files, LAB, 'version: "1.36.1"')))
    assert shown["fabric.switch.dscp_to_priority.26"] == ("3", str(line_of(lab_files, ROCE, "dscp_to_priority")))
    assert {"site", "power_basis", "fabric.host.mtu", "kubernetes.cni", "provisioning.max_fail_percentage"} <= set(shown)
    assert shown["mirror.host"] == ("mgmt-1", str(line_of(lab_files, LAB, "host: mgmt-1")))
    assert re.search(rf"^mirror\.air_gapped = true +{BUILT_IN}$", out, re.M)


def test_without_show_origin_validate_prints_no_settings(lab_files, capsys):
    main(["validate", "lab", "--root", str(lab_files.root)])

    assert "fabric.switch.mtu" not in capsys.readouterr().out


def test_a_site_drops_an_inherited_kubernetes_section_with_null(lab_files):
    text = lab_files.read(LAB)
    lab_files.write(LAB, text[: text.index("kubernetes:")] + "kubernetes: null\n")

    site = lab_files.load()

    assert site.kubernetes is None and site.kubernetes_loc is None
