"""Set-up does what it says: `make run` installs the runtime only and its stdout is the
exporter's alone, the package builds without a warning, docs/testing.md says what
`make test` changes on the host (every set-up script, every mount, link and permission),
and the README's test command is the one CI runs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO, parse, promtool_check_metrics

NO_DEVICES = {"LD_LIBRARY_PATH": "/nonexistent", "GPU_EXPORTER_PATH_SYSFS": "/nonexistent"}


def _make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=REPO,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=300)


def _installs(target: str) -> list[str]:
    """The pip install lines `make <target>` runs from scratch (dry run, every step)."""
    res = _make("-n", "-B", target)
    assert res.returncode == 0, res.stderr
    return [line for line in res.stdout.splitlines() if "pip install" in line]


def test_make_run_installs_the_runtime_dependencies_only() -> None:
    run = _installs("run")
    assert any(re.search(r"pip install .*-e \.( |$)", line) for line in run), run
    assert not any("[dev]" in line for line in run), run
    assert any("'.[dev]'" in line for line in _installs("test"))


def test_make_run_dump_writes_the_exposition_alone() -> None:
    # The venv is the suite's own (make test made it): not rebuilt for this.
    res = _make("-o", ".venv/.installed-run", "run",
                "ARGS=dump --no-collector.nvidia --no-collector.processes", env=NO_DEVICES)
    assert res.returncode == 0, res.stderr
    promtool_check_metrics(res.stdout)
    assert parse(res.stdout), res.stdout
    # Installs would report on stderr too: every line of make's own recipe is silent.
    dry = _make("-n", "-B", "run").stdout.splitlines()
    steps = [line for line in dry if not line.startswith(".venv/bin/gpu-exporter")]
    assert steps and all(line.endswith(">&2") or line.startswith("touch ")
                         for line in steps), dry


def test_the_package_builds_without_warnings(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "gpu_exporter", src / "gpu_exporter",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    res = subprocess.run(
        [sys.executable, "-W", "always", "-c",
         # a wheel (pip install .) and an editable one (make run, make test: pip -e)
         f"from setuptools import build_meta as b; b.build_wheel({str(tmp_path)!r}); "
         f"b.build_editable({str(tmp_path)!r})"],
        cwd=src, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    output = res.stdout + res.stderr
    warnings = [line for line in output.splitlines() if "warn" in line.lower()]
    assert not warnings, output
    assert len(list(tmp_path.glob("gpu_exporter-*.whl"))) == 2


def _make_test_section() -> str:
    text = (REPO / "docs" / "testing.md").read_text()
    start = text.index("\n## What `make test` changes on the machine\n")
    return " ".join(text[start:text.index("\n## ", start + 1)].split())


def test_docs_say_what_make_test_changes_on_the_host() -> None:
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "system-deps" in recipe.splitlines()[0] and "setup-test-host.sh" in recipe
    said = _make_test_section()
    assert "scripts/apt-packages.txt" in said
    scripts = sorted((REPO / "scripts" / "setup-test-host.d").glob("*.sh"))
    assert scripts
    for script in scripts:
        assert f"scripts/setup-test-host.d/{script.name}" in said, script.name
        body = script.read_text()
        # What each script changes is named: mount points, links, permissions.
        for where in re.findall(r"mount -t \S+ nodev (\S+)", body):
            assert where in said, (script.name, where)
        if "ln -s" in body:
            assert "/lib/modules" in said and "linux-headers" in said, script.name
        for mode in re.findall(r"chmod (\S+)", body):
            assert mode in said, (script.name, mode)


def test_readme_test_command_is_the_one_ci_runs() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n## Test it\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, section
    commands = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    # the test command first; the contributors' fast lane may follow it
    assert [c for c in commands if c] in (["make test"], ["make test", "make check"])
    assert "(docs/testing.md)" in section
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert ci[-1] == "make test", ci


# -- make demo: what it installs, and apt's lock -----------------------------------------
def _packages(path: Path) -> set[str]:
    return {line.strip() for line in path.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")}


def test_make_demo_installs_only_what_the_demo_uses() -> None:
    """The demo's own apt list and the runtime venv: none of the test toolchain (hipcc,
    libamdhip64-dev, kernel headers, bcc, Prometheus, ...), and every program demo.sh
    starts comes from a package of that list."""
    demo = _packages(REPO / "scripts" / "apt-packages-demo.txt")
    dry = _make("-n", "-B", "demo").stdout
    assert "scripts/apt-packages-demo.txt" in dry and "scripts/apt-packages.txt" not in dry
    assert not any("[dev]" in line for line in _installs("demo")), dry
    assert any(re.search(r"pip install .*-e \.( |$)", line) for line in _installs("demo"))
    assert not demo & {"hipcc", "libamdhip64-dev", "linux-headers-amd64", "python3-bpfcc",
                       "g++", "prometheus", "iproute2", "systemd", "curl"}, demo
    assert demo < _packages(REPO / "scripts" / "apt-packages.txt") | {"python3-venv"}
    script = (REPO / "scripts" / "demo.sh").read_text()
    tools = set(re.search(r"for tool in ([\w -]+); do", script).group(1).split())  # type: ignore[union-attr]
    assert tools == {"victoria-metrics", "vmalert", "prometheus-alertmanager"}
    owners = {}
    for tool in sorted(tools):
        path = shutil.which(tool)
        assert path, f"{tool}: make system-deps-demo"
        res = subprocess.run(["dpkg", "-S", os.path.realpath(path)], capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        owners[tool] = res.stdout.split(":", 1)[0]
    assert set(owners.values()) <= demo, owners
    # the fake NVML the simulated node runs on is built with the C compiler
    assert {"gcc", "libc6-dev"} <= demo


def _fake_apt(tmp_path: Path, script: str) -> dict[str, str]:
    """PATH with apt-get, dpkg-query and sudo stand-ins: no package is installed, and apt-get
    runs `script` (its arguments in "$@"), recording each call in calls.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dpkg-query").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "sudo").write_text('#!/bin/sh\nexec "$@"\n')  # a user's run: the same calls
    (bin_dir / "apt-get").write_text(
        f'#!/bin/sh\necho "$*" >> {tmp_path}/calls.log\n{script}\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_apt_waits_for_its_lock(tmp_path: Path) -> None:
    env = _fake_apt(tmp_path, "exit 0")
    env["APT_LOCK_TIMEOUT"] = "42"
    listing = tmp_path / "pkgs.txt"
    listing.write_text("# one\nsome-package\n")
    res = subprocess.run(["bash", str(REPO / "scripts" / "install-system-deps.sh"),
                          str(listing)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert len(calls) == 2 and all("-o DPkg::Lock::Timeout=42" in c for c in calls), calls
    assert calls[1].endswith("install -y -qq --no-install-recommends some-package")
    assert "waits up to 42 s for its lock" in res.stderr


def test_apt_that_cannot_get_its_lock_says_why(tmp_path: Path) -> None:
    # what apt-get prints when the lock is still held after the timeout
    env = _fake_apt(tmp_path, 'echo "E: Could not get lock /var/lib/dpkg/lock-frontend. '
                              'It is held by process 4242 (unattended-upgr)" >&2; exit 100')
    listing = tmp_path / "pkgs.txt"
    listing.write_text("some-package\n")
    res = subprocess.run(["bash", str(REPO / "scripts" / "install-system-deps.sh"),
                          str(listing)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert "Could not get lock" in res.stderr
    assert "apt-get update failed: if another package manager held the lock for 300 s" \
        in res.stderr
    env["APT_LOCK_TIMEOUT"] = "soon"
    res = subprocess.run(["bash", str(REPO / "scripts" / "install-system-deps.sh"),
                          str(listing)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "APT_LOCK_TIMEOUT=soon" in res.stderr
