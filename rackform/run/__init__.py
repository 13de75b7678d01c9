"""Drivers that act on a rendered project: ansible-runner (`rackform.run.ansible`).

Shared by the `rackform` CLI and the Pulumi `Playbook` provider, so both run
stages the same way and read the same `RunResult`.
"""
