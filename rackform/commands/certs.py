"""`rackform certs renew SITE`: renew the control plane's kubeadm certificates (certs-renew.yml).

kubeadm's certificates (the API server's, etcd's, the front proxy's and the client certificates
of the kubeconfigs under /etc/kubernetes) last a year; `rackform verify` fails inside the site's
margin (kubernetes.cert_expiry_margin_days) and the alert KubeadmCertificateExpiresSoon warns a
month ahead. This runs the project's certs-renew.yml through the stage runner
(`rackform.run.stages.run_day2_playbook`: under the site's lock, validate.yml first, the
signals' cancel; it records no stage, since it changes none of a stage's inputs): one
control-plane node at a time, `kubeadm certs renew all`, each static pod restarted onto the new
certificates, the node's API healthy and Ready again before the next one, the admin kubeconfig
fetched again. Then prints each node's certificates and their new expiry.

Refused (exit 2) for an unknown site or one without Kubernetes; not run (exit 1) where this
controller has no kubeconfig of the site's cluster (no cluster was deployed from here).
docs/operations.md, "Certificates".
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rackform.commands import cluster_playbook

HELP = "The control plane's kubeadm certificates: renew them, one control-plane node at a time (docs/operations.md)."
RENEW_HELP = ("kubeadm certs renew all on each control-plane node in turn, its static pods restarted onto the new "
              "certificates, the API answering throughout (certs-renew.yml); the admin kubeconfig fetched again.")
PLAYBOOK = "certs-renew.yml"
REPORT_TASK = "Report each certificate's new expiry"
"""The task of role kubeadm (tasks/certs_renew.yml) whose message is {certificate: new expiry}."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="certs_command", required=True, metavar="ACTION")
    renew = actions.add_parser("renew", help=RENEW_HELP, description=RENEW_HELP)
    renew.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
    renew.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
    renew.add_argument("--private-key", type=Path, metavar="PATH", help="SSH key (default as for deploy)")
    renew.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    site = cluster_playbook.cluster_site(args.site, args.root, "no kubeadm certificates to renew")
    control_plane = site.kubernetes.control_plane
    print(f"certs renew {site.name}: kubeadm certs renew all on {', '.join(control_plane)}, one node at a time")
    return _renew(site.name, args.root, args.private_key)


def _renew(site_name: str, root: Path, private_key: Path | None) -> int:
    def report_expiry(result) -> None:
        print("\n".join(expiry_lines(renewed_expiry(result.run_dir))))

    # A renewal that did not run fails (exit 1): nothing renewed must not pass as done.
    return cluster_playbook.run_cluster_playbook(site_name, root, PLAYBOOK, private_key=private_key,
                                                 after_run=report_expiry)


def renewed_expiry(run_dir: Path | None) -> dict[str, dict[str, str]]:
    """Node -> {certificate: its new expiry}, from the run's events (ansible-runner's
    artifacts/<ident>/job_events/): what each node's REPORT_TASK said, in node order."""
    found: dict[str, dict[str, str]] = {}
    if run_dir is None:
        return found
    events = []
    for path in Path(run_dir).glob("artifacts/*/job_events/*.json"):
        try:
            events.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue  # a half-written event: the others still say what they say
    for event in sorted(events, key=lambda event: event.get("counter", 0)):
        data = event.get("event_data") or {}
        message = (data.get("res") or {}).get("msg")
        if event.get("event") == "runner_on_ok" and data.get("task") == REPORT_TASK and isinstance(message, dict):
            found[str(data.get("host", ""))] = {str(name): str(date) for name, date in message.items()}
    return found


def expiry_lines(expiry: dict[str, dict[str, str]]) -> list[str]:
    """One line per node: its certificates and the day each now expires."""
    if not expiry:
        return ["no node reported its certificates' new expiry"]
    return [f"{node}: " + ", ".join(f"{name} {date[:10]}" for name, date in certificates.items())
            for node, certificates in expiry.items()]
