"""Fixtures shared by every test area. Area-specific fixtures live in that area's own
conftest.py (tests/<area>/conftest.py)."""
