"""Values marked as trusted templates, for tests that render a role's expressions with Ansible's own
Templar: ansible-core 2.19 and later render only strings so marked (older ones trust every string)."""

from __future__ import annotations

try:
    from ansible.template import trust_as_template
except ImportError:  # pragma: no cover - ansible-core < 2.19 trusts every string
    def trust_as_template(value):
        return value


def trusted(value):
    """`value` with every string in it, however deep in lists and dicts, marked as a trusted template."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [trusted(item) for item in value]
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    return value
