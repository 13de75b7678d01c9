"""Preflight checks: addresses (to be written)."""
