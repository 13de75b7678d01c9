"""Preflight checks: racks (to be written)."""
