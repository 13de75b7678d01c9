"""Rolling-maintenance batches, the maintain refusals, and `upgrade`'s version step rules."""

from __future__ import annotations

import pytest

from rackform.cli import main
from rackform.day2 import maintain, upgrade
from rackform.model.source import BadInput


def test_batches_respect_batch_and_max_unavailable():
    hosts = ["a", "b", "c", "d", "e"]
    assert maintain.batches(hosts, 2) == [["a", "b"], ["c", "d"], ["e"]]
    assert maintain.batches(hosts, 3, max_unavailable=1) == [["a"], ["b"], ["c"], ["d"], ["e"]]
    with pytest.raises(ValueError, match="--batch must be at least 1"):
        maintain.batches(hosts, 0)


def test_maintain_dry_run_lists_the_batches(site_root, capsys):
    assert main(["maintain", "lab", "--root", str(site_root), "--batch", "4", "--max-unavailable", "2",
                 "--power-cycle", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "maintain lab: 6 host(s) in 3 batch(es) of at most 2: BMC power cycle" in out
    assert "  batch 1: mgmt-1, mgmt-2\n  batch 2: mgmt-3, stor-1\n  batch 3: gpu-1, gpu-2\n" in out


@pytest.mark.parametrize("argv, said", [
    (["--batch", "2"], "nothing to do: give --reboot, --upgrade-packages, --hook PATH and/or --power-cycle"),
    (["--batch", "2", "--reboot", "--limit", "gpu-9"], "unknown host(s) gpu-9"),
    (["--batch", "0", "--reboot"], "--batch must be at least 1"),
    (["--batch", "1", "--hook", "/nonexistent/fw-update"], "/nonexistent/fw-update: no such program"),
])
def test_maintain_refusals_exit_2(site_root, capsys, argv, said):
    assert main(["maintain", "lab", "--root", str(site_root), *argv]) == 2
    assert said in capsys.readouterr().err


def test_hook_gets_the_hosts_facts(tmp_path, lab_site):
    hook = tmp_path / "hook.sh"
    hook.write_text('#!/bin/sh\necho "$RACKFORM_HOST $RACKFORM_BMC_ADDRESS $RACKFORM_BLOCK"\n'
                    '[ "$RACKFORM_HOST" != gpu-2 ]\n')
    hook.chmod(0o755)
    assert maintain.run_hook(hook, lab_site, lab_site.hosts["gpu-1"]) == (True, "hook exit 0: gpu-1 10.10.1.15 dgx-h100")
    assert maintain.run_hook(hook, lab_site, lab_site.hosts["gpu-2"]) == (False, "hook exit 1: gpu-2 10.10.1.16 dgx-h100")


def test_upgrade_patch_step_is_allowed(lab_site, repo_root):
    # The lab pins 1.36.1, the carried release one patch before the matrix default.
    assert upgrade.check_step(lab_site, repo_root, "1.36.3") == ["1.36.1 -> 1.36.3"]


def test_upgrade_to_a_release_the_mirror_does_not_carry_is_refused(lab_site, repo_root):
    with pytest.raises(BadInput, match=r"1\.36\.4 is not a release the site mirror carries \(it carries 1\.36\.3, "
                                       r"1\.36\.1\)") as caught:
        upgrade.check_step(lab_site, repo_root, "1.36.4")
    assert [(e.loc.path, e.key) for e in caught.value.errors] == [("topologies/versions.yaml", "kubernetes.version")]


@pytest.mark.parametrize("target, said", [
    ("1.36.0", "1.36.0 is older than the site's 1.36.1: kubeadm does not downgrade a cluster"),
    ("1.35.9", "1.35.9 is older than the site's 1.36.1: kubeadm does not downgrade a cluster"),
    ("1.38.0", "skips a minor: kubeadm upgrades one minor at a time; go to 1.37.x first"),
    ("2.0", "'2.0' is not a Kubernetes version like 1.36.3"),
])
def test_upgrade_step_refusals(lab_site, repo_root, target, said):
    with pytest.raises(BadInput, match=said.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        upgrade.check_step(lab_site, repo_root, target)


def test_upgrade_to_a_minor_the_platform_lacks_says_what_must_change(site_root, capsys):
    before = (site_root / "topologies/sites/lab.yaml").read_text()
    assert main(["upgrade", "lab", "--root", str(site_root), "--to", "1.37.0"]) == 2
    err = capsys.readouterr().err
    matrix_line = next(number for number, line in enumerate(
        (site_root / "topologies/versions.yaml").read_text().splitlines(), 1) if line.startswith("      v25.3.0:"))
    assert (f"topologies/versions.yaml:{matrix_line}: platform.versions.gpu_operator: gpu_operator v25.3.0 does not "
            f"support Kubernetes 1.37") in err
    assert "the matrix has no gpu_operator release for 1.37: add one (with its source) first" in err
    assert (site_root / "topologies/sites/lab.yaml").read_text() == before


def test_upgrade_from_an_older_pinned_minor_one_step(lab_files):
    # A site without a mirror (it reaches its own package sources) may go to any release.
    lab_files.edit("topologies/sites/lab.yaml", "mirror:\n  host: mgmt-1\n", "")
    lab_files.pin_lab_kubernetes("1.35.2")
    site = lab_files.load()
    # 1.35 -> 1.36: every default release supports 1.36 too: allowed.
    assert upgrade.check_step(site, lab_files.root, "1.36.3") == ["1.35.2 -> 1.36.3"]


def test_upgrade_rewrites_the_site_s_pin_quoted_in_place(lab_files, capsys):
    before = lab_files.read("topologies/sites/lab.yaml")
    assert main(["upgrade", "lab", "--root", str(lab_files.root), "--to", "1.36.3"]) == 0
    out = capsys.readouterr().out
    assert '-  version: "1.36.1"\n' in out and '+  version: "1.36.3"\n' in out
    assert "upgrade-cluster.yml not run: no kubeconfig for this site" in out
    # only the pin changed: comments and order kept
    assert lab_files.read("topologies/sites/lab.yaml") == before.replace('  version: "1.36.1"\n', '  version: "1.36.3"\n')
    assert lab_files.load().kubernetes.version == "1.36.3"


def test_upgrade_of_a_site_on_the_matrix_default_writes_the_version_quoted_in_place(lab_files, capsys):
    # The matrix's default at the older carried release: the site pins no version of its own.
    lab_files.pin_lab_kubernetes(None)
    lab_files.edit("topologies/versions.yaml", '  default: "1.36.3"', '  default: "1.36.1"')
    assert main(["upgrade", "lab", "--root", str(lab_files.root), "--to", "1.36.3"]) == 0
    out = capsys.readouterr().out
    assert '+  version: "1.36.3"\n' in out
    assert "upgrade-cluster.yml not run: no kubeconfig for this site" in out
    text = lab_files.read("topologies/sites/lab.yaml")
    assert ('kubernetes:  # pod and service prefixes and CNI: profile kubernetes and topologies/versions.yaml\n'
            '  version: "1.36.3"\n  control_plane: [mgmt-1, mgmt-2, mgmt-3]\n') in text


def test_scale_refusals(site_root, capsys):
    assert main(["scale", "lab", "--root", str(site_root), "--nodes", "gpu-9"]) == 2
    assert "unknown host(s) gpu-9" in capsys.readouterr().err
    assert main(["scale", "lab", "--root", str(site_root), "--nodes", "mgmt-1"]) == 2
    assert "mgmt-1 are control-plane nodes" in capsys.readouterr().err
