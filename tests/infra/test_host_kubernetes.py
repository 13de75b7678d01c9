"""Stage kubernetes (role k8s_prereqs) on the cluster nodes: kernel modules listed
for boot, the Kubernetes sysctls, swap off now and after a reboot."""

from __future__ import annotations

import pytest

from checklib import mismatches, parse_sysctl_lines, sysctl_text

pytestmark = [pytest.mark.stage("kubernetes"), pytest.mark.machines("k8s_cluster")]

ROLE = "k8s_prereqs"


@pytest.fixture
def kubernetes_sysctls(role_setting) -> dict[str, str]:
    return {key: sysctl_text(value) for key, value in role_setting(ROLE, "k8s_prereqs_sysctls").items()}


def test_kernel_modules_listed_for_boot(host, role_setting):
    path = role_setting(ROLE, "k8s_prereqs_modules_file")
    listing = host.file(path)
    listed = {line.strip() for line in listing.content_string.splitlines()} if listing.exists else set()
    missing = [module for module in role_setting(ROLE, "k8s_prereqs_kernel_modules") if module not in listed]
    assert not missing, f"{path} lacks {', '.join(missing)}"


def test_kubernetes_sysctls_kept_at_boot(host, role_setting, kubernetes_sysctls):
    path = role_setting(ROLE, "k8s_prereqs_sysctl_file")
    written = host.file(path)
    problems = mismatches(parse_sysctl_lines(written.content_string) if written.exists else {}, kubernetes_sysctls)
    assert not problems, f"{path}: {problems}"


def test_kubernetes_sysctls_set_now(live_sysctls, role_setting, kubernetes_sysctls):
    now = {key: kubernetes_sysctls[key] for key in role_setting(ROLE, "k8s_prereqs_sysctls_set_now")}
    problems = mismatches(live_sysctls(list(now)), now)
    assert not problems, f"sysctl {problems}"


def test_swap_off(host):
    active = host.check_output("swapon --show=NAME --noheadings").split()
    assert not active, f"swap is on: {', '.join(active)} (the kubelet refuses to start)"


def test_swap_stays_off_after_reboot(host):
    entries = [line.split() for line in host.file("/etc/fstab").content_string.splitlines()]
    swap = [fields[0] for fields in entries
            if len(fields) >= 3 and not fields[0].startswith("#") and fields[2] == "swap"]
    assert not swap, f"/etc/fstab still mounts swap: {', '.join(swap)}"
