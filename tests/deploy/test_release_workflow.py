"""The release workflow (.github/workflows/release.yml): a version tag publishes the image
for amd64 and arm64 to GitHub's container registry. No runner, registry or container
engine is here: the file is checked against GitHub's workflow schema (check-jsonschema's
vendored copy) and by zizmor (offline audits: pinned actions, credentials, injection),
and what it builds is checked to be what `make image` builds. Not run: the build, QEMU's
arm64 emulation, the push."""

from __future__ import annotations

import re
import subprocess

import yaml

from gpu_exporter import __version__
from tests.helpers import BIN, REPO

WORKFLOW = REPO / ".github" / "workflows" / "release.yml"


def test_the_workflow_matches_githubs_schema() -> None:
    res = subprocess.run([str(BIN / "check-jsonschema"), "--builtin-schema",
                          "vendor.github-workflows", str(WORKFLOW)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_zizmor_finds_nothing() -> None:
    res = subprocess.run([str(BIN / "zizmor"), "--offline", str(WORKFLOW)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_version_tag_publishes_a_multi_arch_image() -> None:
    doc = yaml.safe_load(WORKFLOW.read_text())
    on = doc[True] if True in doc else doc["on"]  # YAML 1.1 reads `on` as a boolean
    assert on == {"push": {"tags": ["v*.*.*"]}}
    [job] = doc["jobs"].values()
    steps = {s.get("uses", "").split("@")[0]: s for s in job["steps"]}
    build = steps["docker/build-push-action"]["with"]
    assert build["platforms"] == "linux/amd64,linux/arm64" and build["push"] is True
    assert "docker/setup-qemu-action" in steps  # arm64 on an amd64 runner
    assert steps["docker/login-action"]["with"]["registry"] == "ghcr.io"
    assert job["permissions"] == {"contents": "read", "packages": "write"}
    for s in job["steps"]:
        if "uses" in s:  # pinned to a commit, the release named beside it
            assert re.fullmatch(r"[\w./-]+@[0-9a-f]{40}", s["uses"]), s["uses"]
    # the tag must be the package version, which the image and the Kubernetes base carry
    check = next(s for s in job["steps"] if s.get("name") == "The tag is the package version")
    assert "gpu_exporter/__init__.py" in check["run"]


def test_make_image_tags_the_package_version() -> None:
    res = subprocess.run(["make", "-n", "image"], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["docker", "build", "--build-arg", f"VERSION={__version__}",
                                  "-t", f"gpu-exporter:{__version__}", "."]
    res = subprocess.run(["make", "-n", "image", "IMAGE=registry.example.com/gpu-exporter"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert f"-t registry.example.com/gpu-exporter:{__version__} ." in res.stdout
