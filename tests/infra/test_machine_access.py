"""Every managed Linux machine runs its SSH daemon; Cumulus switches run lldpd.

Nothing here depends on a deployment stage: a machine fresh from its installer
must already pass these.
"""

from __future__ import annotations

import pytest


@pytest.mark.machines("servers", "cumulus")
def test_sshd_running(host):
    # Debian names the unit ssh.service, Red Hat sshd.service: one of them must be active.
    states = host.run("systemctl is-active ssh.service sshd.service").stdout.split()
    assert "active" in states, f"sshd is not running (ssh.service, sshd.service: {', '.join(states)})"


@pytest.mark.machines("cumulus")
def test_lldpd_running(unit_state):
    state = unit_state("lldpd.service")
    assert state["ActiveState"] == "active", f"lldpd is {state['ActiveState']}"
