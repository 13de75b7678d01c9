"""What every unit test shares: a secrets root of its own.

Unit tests that run a stage or open a site's vault would otherwise read and write the user's
real one ($XDG_STATE_HOME/rackform/secrets: a lab's BMC passwords, its cluster encryption keys,
its mirror keys). A test that needs a particular root still sets RACKFORM_SECRETS_DIR itself.
"""

from __future__ import annotations

import pytest

from rackform.secrets import ENV_SECRETS_DIR


@pytest.fixture(scope="session")
def unit_secrets_root(tmp_path_factory):
    return tmp_path_factory.mktemp("secrets")


@pytest.fixture(autouse=True)
def own_secrets_root(monkeypatch, unit_secrets_root):
    monkeypatch.setenv(ENV_SECRETS_DIR, str(unit_secrets_root))
