"""Readers: hardware and kernel sources to typed, base-unit records (no Prometheus here)."""
