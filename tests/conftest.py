"""Fixtures shared by every test area. Area-specific fixtures live in that area's own
conftest.py (tests/<area>/conftest.py)."""

import os

# Every series of every scrape in the tests, in process and in the exporter processes
# they start, is checked against its family's label schema (gpu_exporter/family.py): an
# undeclared label or a missing required one fails the scrape.
os.environ["GPU_EXPORTER_CHECK_LABELS"] = "1"

# The exporters the tests start are not in a Kubernetes pod, even where CI itself runs in
# one: without this variable a missing kubelet socket means "not a Kubernetes node".
os.environ.pop("KUBERNETES_SERVICE_HOST", None)
