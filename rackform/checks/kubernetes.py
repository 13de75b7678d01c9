"""Preflight checks: kubernetes (to be written)."""
