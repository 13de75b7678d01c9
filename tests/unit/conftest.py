"""What every unit test shares: a secrets root of its own, and a folder of mirror bundles of its own.

Unit tests that run a stage or open a site's vault would otherwise read and write the user's
real one ($XDG_STATE_HOME/rackform/secrets: a lab's BMC passwords, its cluster encryption keys,
its mirror keys). A test that needs a particular root still sets RACKFORM_SECRETS_DIR itself.

Rendering reads the controller's mirror bundles (the manifest's digest, each image's digest): a
unit test sees an empty bundles folder, so it renders the same on a fresh machine as on one where
`rackform mirror build` ran; a test that needs a bundle writes one (tests/unit/test_bundle_preflight.py).
"""

from __future__ import annotations

import pytest

from rackform.mirror import bundle
from rackform.secrets import ENV_SECRETS_DIR


@pytest.fixture(scope="session")
def unit_secrets_root(tmp_path_factory):
    return tmp_path_factory.mktemp("secrets")


@pytest.fixture(autouse=True)
def own_secrets_root(monkeypatch, unit_secrets_root):
    monkeypatch.setenv(ENV_SECRETS_DIR, str(unit_secrets_root))


@pytest.fixture(scope="session", autouse=True)
def unit_bundles_dir(tmp_path_factory):
    """One empty bundles folder for the whole session, set before any fixture renders (module
    fixtures render once for many tests): rendered files name its path."""
    bundles = tmp_path_factory.mktemp("bundles")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bundle, "BUNDLES_DIR", bundles)
        patch.setenv("RACKFORM_MIRROR_BUNDLES", str(bundles))
        yield bundles


@pytest.fixture(autouse=True)
def bundles_left_empty(unit_bundles_dir):
    """A test that builds a bundle gives itself a folder of its own (monkeypatching BUNDLES_DIR
    again); one that wrote into the shared one fails at its teardown rather than change what
    later tests render."""
    yield
    left = sorted(path.name for path in unit_bundles_dir.iterdir())
    assert left == [], f"the test wrote {left} into the shared empty bundles folder: give it its own"
