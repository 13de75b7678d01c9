"""What several checks derive from a site is derived once per `run_checks`
(rackform.checks.run_memo), and never outlives that run."""

from __future__ import annotations

from ipaddress import IPv4Address

from rackform.checks import addresses
from rackform.checks.runner import run_checks
from rackform.checks.run_memo import derived, one_run


def test_the_assigned_addresses_are_walked_once_per_run(lab_site, monkeypatch):
    walks = []
    walk = addresses.assigned_addresses

    def counted(site):
        walks.append(site)
        return walk(site)

    monkeypatch.setattr(addresses, "assigned_addresses", counted)
    run_checks(lab_site)
    assert walks == [lab_site]
    run_checks(lab_site)
    assert walks == [lab_site, lab_site]


def _duplicate_findings(site) -> list[str]:
    return [str(finding) for finding in run_checks(site) if finding.check == "unique_addresses"]


def test_a_site_changed_between_two_runs_is_checked_as_it_is_now(lab_site):
    assert _duplicate_findings(lab_site) == []
    first, second = list(lab_site.hosts.values())[:2]
    second.management_address = first.management_address
    assert _duplicate_findings(lab_site) != []
    assert addresses.assigned_address_list(lab_site) == tuple(addresses.assigned_addresses(lab_site))


def test_outside_a_run_every_call_derives_afresh(lab_site):
    builds = []
    assert derived(lab_site, "x", builds.append) is None
    assert derived(lab_site, "x", builds.append) is None
    assert builds == [lab_site, lab_site]


def test_inside_a_run_each_site_gets_its_own_value(lab_site, repo_root):
    from rackform.model.loader import load_site

    other = load_site("lab", repo_root)
    with one_run():
        assert derived(lab_site, "x", lambda site: 1) == 1
        assert derived(lab_site, "x", lambda site: 2) == 1
        assert derived(other, "x", lambda site: 3) == 3
    assert derived(lab_site, "x", lambda site: 4) == 4
    assert isinstance(addresses.assigned_address_list(lab_site)[0][0], IPv4Address)
