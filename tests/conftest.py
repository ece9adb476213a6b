"""Fixtures shared by every test area. Area-specific fixtures live in that area's own
conftest.py (tests/<area>/conftest.py)."""

import os

import pytest

from tests import lanes
from tests.helpers import REPO

# Every series of every scrape in the tests, in process and in the exporter processes
# they start, is checked against its family's label schema (gpu_exporter/model/metric_types.py): an
# undeclared label or a missing required one fails the scrape.
os.environ["GPU_EXPORTER_CHECK_LABELS"] = "1"

# The exporters the tests start are not in a Kubernetes pod, even where CI itself runs in
# one: without this variable a missing kubelet socket means "not a Kubernetes node".
os.environ.pop("KUBERNETES_SERVICE_HOST", None)


# The lanes (tests/lanes.py): every test gets the markers of what it needs at
# collection; `pytest --lane=fast` (`make check`) runs those needing none of them.
_GUARD = lanes.Guard()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lane", choices=("all", "fast"), default="all",
        help="fast: only tests that need no root, bcc, server, apt tool or exporter "
             "process (make check); all: every test (make test)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("lane") == "fast":
        expr = config.option.markexpr
        config.option.markexpr = f"({expr}) and {lanes.FAST}" if expr else lanes.FAST
        _GUARD.install()


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    lanes.mark(items, REPO)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> object:
    _GUARD.item = item
    try:
        return (yield)
    finally:
        _GUARD.item = None
