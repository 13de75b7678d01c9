"""Preflight checks: roce (to be written)."""
