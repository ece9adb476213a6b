"""One version everywhere: the package, the image label, and the image tag that compose,
Kubernetes, the README and docs/deploy.md run."""

from __future__ import annotations

import re

from gpu_exporter import __version__
from tests.deploy.dockerfile import instructions
from tests.helpers import REPO


def test_image_tags_follow_the_package_version() -> None:
    arg = next(i.args for i in instructions(REPO / "Dockerfile")
               if i.keyword == "ARG" and i.args.startswith("VERSION="))
    assert arg == f"VERSION={__version__}"
    files = [REPO / "deploy/compose/compose.yaml", REPO / "deploy/kubernetes/base/daemonset.yaml",
             REPO / "README.md", REPO / "docs" / "deploy.md"]
    for path in files:
        tags = set(re.findall(r"\bgpu-exporter:(\d+\.\d+\.\d+[\w.+-]*)", path.read_text()))
        assert tags == {__version__}, (path, tags)
