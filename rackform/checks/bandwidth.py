"""Preflight checks: bandwidth (to be written)."""
