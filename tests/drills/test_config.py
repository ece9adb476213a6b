"""Config drill: every option, given a bad value by flag and by environment variable,
stops the exporter with one clear line and the exit code docs/configuration.md documents.

tests/core/test_cli.py checks a hand-picked list; this walks every option the CLI has
(global and per collector, present and future), so a new option cannot slip in without
a checked error path.
"""

from __future__ import annotations

import re
import socket
from typing import Any

import click
import pytest

from gpu_exporter.commands import cli
from gpu_exporter.model.settings import Option
from tests.drills.conftest import NO_DEVICES
from tests.helpers import REPO, run_cli

_STR_BAD_VALUES: dict[str, list[str]] = {
    # The other string options (paths to sysfs/procfs) are not faults: a missing tree
    # makes the collectors that need it unavailable, reported by doctor.
    "web.listen-address": ["nonsense", ":0", ":65536", "host:port", "[::1]", "[::1",
                           "256.1.1.1:1"],
    "web.telemetry-path": ["metrics", "/", "/healthz", "//metrics", "/a/../metrics"],
    "web.config.file": ["/nonexistent/web.yml"],
    # host collector exclusions are regular expressions
    "host.filesystem-types-exclude": ["("],
    "host.filesystem-mountpoints-exclude": ["[a-"],
    "host.disks-exclude": ["*loop"],
    "host.network-interfaces-exclude": ["(?P<x"],
}


def _is_rejected(opt: Option[Any], text: str) -> bool:
    """Does the option's own parser refuse this text? (Derived, not assumed.)"""
    kind = opt.type
    try:
        if isinstance(kind, click.ParamType):
            kind.convert(text, None, None)
        elif kind is bool:
            click.BOOL.convert(text, None, None)
        else:
            kind(text)
    except (click.BadParameter, ValueError, TypeError):
        return True
    return False


def _bad_values(opt: Option[Any]) -> list[str]:
    if opt.name in _STR_BAD_VALUES:
        return _STR_BAD_VALUES[opt.name]
    candidates = ["not-a-value", "-1", "0", ""]
    return [c for c in candidates if c != "" and _is_rejected(opt, c)][:2]


def _cases() -> list[Any]:
    cases = []
    for opt in cli.every_option():
        for bad in _bad_values(opt):
            cases.append(pytest.param(opt, bad, "flag", id=f"--{opt.name}={bad}"))
            cases.append(pytest.param(opt, bad, "env", id=f"{cli.env_name(opt.name)}={bad}"))
    return cases


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{stderr}"
    assert lines[0].startswith("gpu-exporter: "), lines[0]
    return lines[0]


def test_every_typed_option_has_a_checked_bad_value() -> None:
    """Each option that parses its value (number, choice, duration, switch) refuses at
    least one bad value here, so the drill below covers it."""
    for opt in cli.every_option():
        if opt.type is str:
            continue
        assert _bad_values(opt), f"--{opt.name}: no value found that its parser refuses"


@pytest.mark.parametrize(("opt", "bad", "how"), _cases())
def test_bad_value_is_one_line_and_exit_2(opt: Option[Any], bad: str, how: str) -> None:
    args = [f"--{opt.name}={bad}"] if how == "flag" else []
    env = {cli.env_name(opt.name): bad} if how == "env" else {}
    if not opt.name.startswith("web."):
        args.append("dump")  # checked before anything listens; web.* only by serve
    res = run_cli(args, {**NO_DEVICES, **env}, timeout=30)
    assert res.returncode == cli.EXIT_CONFIG, (res.returncode, res.stderr)
    line = _one_line(res.stderr)
    # The line names the option (click adds the variable's name when it came from the
    # environment; our own checks name the flag).
    assert f"--{opt.name}" in line or cli.env_name(opt.name) in line, line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["frobnicate"], "No such command"),
        (["--scrape.timeout"], "requires an argument"),
        (["--scrape.timeout=1", "--scrape.timeout"], "requires an argument"),
        (["dump", "--no-such-flag"], "No such option"),
        (["dump", "extra-argument"], "extra-argument"),
    ],
)
def test_malformed_command_lines(args: list[str], message: str) -> None:
    res = run_cli(args, NO_DEVICES, timeout=30)
    assert res.returncode == cli.EXIT_CONFIG, (res.returncode, res.stderr)
    assert message in _one_line(res.stderr)


def test_bad_web_config_contents_exit_2(tmp_path: Any) -> None:
    bad = tmp_path / "web.yml"
    for text in ("tls_server_config: [unclosed", "no_such_key: 1\n", "\x00\x01binary"):
        bad.write_text(text)
        res = run_cli([f"--web.config.file={bad}"], NO_DEVICES, timeout=30)
        assert res.returncode == cli.EXIT_CONFIG, (text, res.returncode, res.stderr)
        assert str(bad) in _one_line(res.stderr)


def test_port_in_use_from_the_environment_is_exit_3() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = run_cli([], {**NO_DEVICES, "GPU_EXPORTER_WEB_LISTEN_ADDRESS": f"127.0.0.1:{port}"})
    assert res.returncode == cli.EXIT_LISTEN, res.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in _one_line(res.stderr)


def test_address_not_on_this_host_is_exit_3() -> None:
    # 192.0.2.0/24 is TEST-NET-1: never a local address, so bind fails (EADDRNOTAVAIL).
    res = run_cli(["--web.listen-address=192.0.2.1:9445"], NO_DEVICES)
    assert res.returncode == cli.EXIT_LISTEN, res.stderr
    assert "cannot listen on 192.0.2.1:9445" in _one_line(res.stderr)


def test_docs_state_the_exit_codes_the_cli_uses() -> None:
    doc = (REPO / "docs" / "configuration.md").read_text()
    m = re.search(r"2 for configuration, 3 when the address cannot be bound, 4 for a "
                  r"collector fault", " ".join(doc.split()))
    assert m, "docs/configuration.md's failure policy no longer states the exit codes"
    assert (cli.EXIT_CONFIG, cli.EXIT_LISTEN, cli.EXIT_FAULT) == (2, 3, 4)
