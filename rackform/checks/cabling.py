"""Preflight checks: cabling (to be written)."""
