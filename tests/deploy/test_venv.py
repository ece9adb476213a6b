"""The venv `make venv` builds is plain: it sees Debian's bcc package (python3-bpfcc, not
on PyPI), which scripts/link-bcc.sh links into its site-packages, and nothing else of the
system: no pytest plugin, no package the project does not declare."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.helpers import REPO

# What the venv's python finds: bcc's path, and which system packages it can see (Debian
# ships apt and yaml in /usr/lib/python3/dist-packages; pytest here is the venv's own).
PROBE = """
import importlib.util, bcc, sys
print(bcc.__file__)
print(sorted(n for n in ("apt", "yaml", "pytest") if importlib.util.find_spec(n)))
print([p for p in sys.path if "dist-packages" in p])
"""


def test_link_bcc_makes_bcc_and_nothing_else_of_the_system_importable(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)],
                   check=True, timeout=120)
    res = subprocess.run(["bash", str(REPO / "scripts/link-bcc.sh"), str(venv)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and not res.stderr, res.stderr
    probe = subprocess.run([str(venv / "bin/python"), "-I", "-c", PROBE],
                           capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    bcc_file, visible, system_paths = probe.stdout.splitlines()
    site = subprocess.run([str(venv / "bin/python"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, timeout=60).stdout.strip()
    assert bcc_file == f"{site}/bcc/__init__.py"
    assert Path(bcc_file).resolve().parent == Path("/usr/lib/python3/dist-packages/bcc")
    assert (visible, system_paths) == ("[]", "[]")


def test_the_suite_runs_in_such_a_venv() -> None:
    # the interpreter running these tests: no system site-packages on its path, and bcc
    # through the link in its own site-packages
    assert [p for p in sys.path if "dist-packages" in p] == []
    import bcc

    assert Path(bcc.__file__).parent == Path(sysconfig.get_paths()["purelib"]) / "bcc"
