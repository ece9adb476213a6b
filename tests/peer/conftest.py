"""The peer tests use the fake /sys trees of the sysfs tests."""

from tests.sysfs.conftest import procfs, sysfs

__all__ = ["procfs", "sysfs"]
