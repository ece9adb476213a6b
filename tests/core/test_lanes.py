"""The lanes (tests/lanes.py): a test gets the marker of what it uses, found in its code,
its fixtures and the suite's functions they call; in the fast lane a test that starts a
program of a marker it does not carry fails."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests import lanes
from tests.fake_nvml import scenario as fake
from tests.helpers import REPO, exporter, require_tool, run_cli

# Never run: read by lanes.Needs as a test's code would be.


def _starts_the_exporter() -> None:
    with exporter(["--collector.nvidia"]):
        pass


def _runs_promtool() -> None:
    subprocess.run([require_tool("promtool"), "--version"], check=True)


def _curl_as_argv() -> None:
    subprocess.run(["curl", "-s", "http://127.0.0.1"], check=False)


def _builds_the_fake_nvml() -> None:
    fake.build()


def _through_a_helper() -> None:
    _builds_the_fake_nvml()
    run_cli(["check"])


def _a_suite_module_in_a_child() -> None:
    subprocess.run([sys.executable, "-m", "tests.attribution.drive"], check=False)


def _pure() -> None:
    # names a program, but as data: no marker
    print({"ip": "192.0.2.1", "make": "NVIDIA"})


@pytest.mark.parametrize(("function", "markers"), [
    (_starts_the_exporter, {"exporter"}),
    (_runs_promtool, {"server"}),
    (_curl_as_argv, {"tools"}),
    (_builds_the_fake_nvml, {"tools"}),
    (_through_a_helper, {"tools", "exporter"}),
    (_a_suite_module_in_a_child, {"tools"}),  # drive.py loads the fake NVML, built
    (_pure, set()),
])
def test_a_function_needs_what_it_and_the_suite_functions_it_calls_use(
        function: object, markers: set[str]) -> None:
    assert lanes.Needs().of(function) == markers


def test_a_folder_adds_what_its_code_does_not_show() -> None:
    # tests/ebpf loads BPF programs in the test's own process, through bcc
    item = SimpleNamespace(path=REPO / "tests/ebpf/test_units.py")
    assert lanes.needs(item, REPO, lanes.Needs()) == {"bcc", "root"}  # type: ignore[arg-type]


class Item:
    """A test item as the guard sees it: its id and its markers."""

    def __init__(self, *markers: str) -> None:
        self.nodeid = "tests/x/test_y.py::test_z"
        self.markers = markers

    def get_closest_marker(self, name: str) -> object:
        return name if name in self.markers else None


def test_the_fast_lane_fails_a_test_that_starts_a_program_of_a_marker_it_lacks() -> None:
    guard = lanes.Guard()
    guard.item = Item()  # type: ignore[assignment]
    # a name no ast could see: the guard sees the process start
    with pytest.raises(pytest.fail.Exception, match="needs the `server` marker"):
        guard.check(["prom" + "tool", "check", "metrics"])
    with pytest.raises(pytest.fail.Exception, match="needs the `exporter` marker"):
        guard.check([sys.executable, "-m", "gpu_exporter", "dump"])
    with pytest.raises(pytest.fail.Exception, match="needs the `root` marker"):
        guard.check("/usr/bin/setpriv --reuid=65534 true")
    guard.check([sys.executable, "-c", "pass"])  # what a test may run in the fast lane
    guard.item = Item("server")  # type: ignore[assignment]
    guard.check(["/usr/bin/prom" + "tool", "check", "metrics"])  # a test that says so may


def test_the_lane_markers_are_declared(request: pytest.FixtureRequest) -> None:
    declared = {line.split(":")[0] for line in request.config.getini("markers")}
    assert set(lanes.LANE_MARKERS) <= declared
    assert lanes.FAST == "not (root or bcc or server or nvidia_libs or tools or exporter)"
