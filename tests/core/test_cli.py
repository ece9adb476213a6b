"""The CLI as users run it: real process, real flags and environment variables."""

from __future__ import annotations

import json
import re
import socket

import pytest

from gpu_exporter import __version__
from tests.helpers import (
    exporter,
    find,
    free_port,
    parse,
    promtool_check_metrics,
    run_cli,
    value,
)

# No GPU here and none faked: the tests below are about the CLI, not the readers.
NO_DEVICES = {"LD_LIBRARY_PATH": "/nonexistent", "GPU_EXPORTER_PATH_SYSFS": "/nonexistent"}


def test_version_and_help() -> None:
    res = run_cli(["--version"])
    assert res.returncode == 0 and __version__ in res.stdout
    res = run_cli(["--help"])
    assert res.returncode == 0
    for flag in ("--web.listen-address", "--web.telemetry-path", "--path.sysfs",
                 "--path.procfs", "--scrape.timeout", "--log.level", "--log.format"):
        assert flag in res.stdout, flag
    assert "GPU_EXPORTER_SCRAPE_TIMEOUT" in res.stdout
    for cmd in ("serve", "dump", "doctor"):
        assert cmd in res.stdout


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--scrape.timeout=0", "dump"], {}, "--scrape.timeout"),
        (["--scrape.timeout=abc", "dump"], {}, "not a duration"),
        (["dump"], {"GPU_EXPORTER_SCRAPE_TIMEOUT": "-3"}, "GPU_EXPORTER_SCRAPE_TIMEOUT"),
        (["--log.level=loud", "dump"], {}, "--log.level"),
        (["--log.format=xml", "dump"], {}, "--log.format"),
        (["--no-such-flag"], {}, "No such option"),
        (["dump"], {"OTEL_RESOURCE_ATTRIBUTES": "team"}, "OTEL_RESOURCE_ATTRIBUTES"),
        (["--web.listen-address=nonsense"], {}, "--web.listen-address"),
        (["--web.listen-address=:99999"], {}, "--web.listen-address"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], env: dict[str, str],
                                          message: str) -> None:
    res = run_cli(args, {**NO_DEVICES, **env})
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("gpu-exporter: ") and message in lines[0], lines[0]


@pytest.mark.parametrize("command", ["serve", "check", "dump", "doctor"])
@pytest.mark.parametrize(("variable", "value"), [
    ("OTEL_SERVICE_NAME", "gpu\udcfffleet"),  # the byte 0xff, as os.environ holds it
    ("OTEL_RESOURCE_ATTRIBUTES", "team=ml\udcfe"),
])
def test_environment_that_is_not_utf8_is_refused_at_start(command: str, variable: str,
                                                          value: str) -> None:
    """Served, every /metrics was an empty reply (the label could not be encoded) while
    /healthz said 200 and `check` exited 0."""
    res = run_cli([command, f"--web.listen-address=127.0.0.1:{free_port()}"],
                  {**NO_DEVICES, variable: value}, timeout=20)
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"gpu-exporter: {variable} is not UTF-8 text (byte 0xf"), lines


def _refused(args: list[str], env: dict[str, str] | None = None) -> str:
    res = run_cli(args, {**NO_DEVICES, **(env or {})})
    assert res.returncode == 2, (args, env, res.returncode, res.stderr)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gpu-exporter: "), res.stderr
    return lines[0]


@pytest.mark.parametrize("text", ["inf", "1e10", "nan", "-inf", "301", "0.05", "1_0"])
def test_durations_are_finite_and_within_their_bounds(text: str) -> None:
    # A timeout the OS cannot wait for used to pass and then fail every scrape.
    assert "--scrape.timeout" in _refused([f"--scrape.timeout={text}", "dump"])
    assert "GPU_EXPORTER_SCRAPE_TIMEOUT" in _refused(
        ["dump"], {"GPU_EXPORTER_SCRAPE_TIMEOUT": text})


def test_durations_take_a_unit() -> None:
    res = run_cli(["--scrape.timeout=1500ms", "--collector.retry-interval=2m", "dump"],
                  NO_DEVICES)
    assert res.returncode == 0, res.stderr
    promtool_check_metrics(res.stdout)


@pytest.mark.parametrize("path", ["/", "/healthz"])
def test_telemetry_path_cannot_take_the_landing_page_or_health_check(path: str) -> None:
    # /healthz answers without a password: metrics there would too.
    line = _refused([f"--web.telemetry-path={path}"])
    assert "--web.telemetry-path" in line and "/healthz" in line


@pytest.mark.parametrize("address", ["[::1", "::1]:9445", "256.1.1.1:1", "1.2.3:9445",
                                     "::1:9445", "[::1]", "host name:1", "[zz::1]:9445"])
def test_malformed_listen_address_is_exit_2(address: str) -> None:
    assert "--web.listen-address" in _refused([f"--web.listen-address={address}"])


def test_flags_before_the_command_apply_to_it() -> None:
    res = run_cli(["--no-collector.host", "dump"], NO_DEVICES)
    assert res.returncode == 0, res.stderr
    assert not find(parse(res.stdout), "system_cpu_utilization_ratio")
    res = run_cli(["--collector.ebpf", "doctor"], NO_DEVICES)
    assert res.returncode == 0, res.stderr
    ebpf = next(line for line in res.stdout.splitlines() if line.startswith("ebpf "))
    assert "disabled" not in ebpf, res.stdout
    # Given on both sides, the command's own flag wins.
    res = run_cli(["--no-collector.host", "dump", "--collector.host"], NO_DEVICES)
    assert find(parse(res.stdout), "system_cpu_utilization_ratio"), res.stderr


def test_port_in_use_is_exit_3() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = run_cli([f"--web.listen-address=127.0.0.1:{port}"], NO_DEVICES)
    assert res.returncode == 3, res.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in res.stderr


def test_dump_prints_self_metrics_and_resource_labels() -> None:
    res = run_cli(["dump"], {**NO_DEVICES, "OTEL_SERVICE_NAME": "svc",
                             "OTEL_RESOURCE_ATTRIBUTES": "team=ml-platform"})
    assert res.returncode == 0, res.stderr
    series = parse(res.stdout)
    build = find(series, "gpu_exporter_build_info")
    assert len(build) == 1 and build[0].labels["version"] == __version__
    for s in series:
        assert s.labels["team"] == "ml-platform" and s.labels["service_name"] == "svc"
        assert s.labels["host_name"] == socket.gethostname()
    promtool_check_metrics(res.stdout)


def test_otel_operator_attributes_do_not_stop_the_exporter() -> None:
    attrs = ("k8s.pod.name=gpu-exporter-x7,k8s.namespace.name=monitoring,"
             "k8s.container.name=exporter,k8s.node.name=node-7,host.name=node-7")
    res = run_cli(["dump"], {**NO_DEVICES, "OTEL_RESOURCE_ATTRIBUTES": attrs})
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if "level=warn" in line]
    assert len(warnings) == 1 and "k8s.pod.name, k8s.namespace.name, k8s.container.name" \
        in warnings[0], res.stderr
    series = parse(res.stdout)
    assert all(s.labels["host_name"] == "node-7" and s.labels["k8s_node_name"] == "node-7"
               and s.labels.get("k8s_pod_name") != "gpu-exporter-x7" for s in series)


def test_env_var_sets_a_flag() -> None:
    with exporter(env={**NO_DEVICES, "GPU_EXPORTER_WEB_TELEMETRY_PATH": "/m"}) as exp:
        assert exp.get("/m")[0] == 200
        assert exp.get("/metrics")[0] == 404


def test_serve_reports_feature_status_for_every_collector() -> None:
    with exporter(env=NO_DEVICES) as exp:
        series = parse(exp.scrape())
    states = find(series, "gpu_exporter_feature_status")
    features = {s.labels["feature"] for s in states}
    from gpu_exporter.collectors import REGISTRY

    names = {cls.name for cls in REGISTRY}
    assert features >= names
    # Optional parts of a running collector (Collector.features): "<collector>.<part>".
    assert all(f.split(".", 1)[0] in names for f in features - names), features
    for feature in features:
        ones = [s for s in states if s.labels["feature"] == feature and s.value == 1]
        assert len(ones) == 1, feature
    assert value(series, "gpu_exporter_build_info") == 1


def test_version_subcommand_and_v_say_what_version_does() -> None:
    outputs = set()
    for args in (["--version"], ["-v"], ["version"]):
        res = run_cli(args)
        assert res.returncode == 0, (args, res.stderr)
        outputs.add(res.stdout)
    assert outputs == {f"gpu-exporter, version {__version__}\n"}


def _unwrapped(text: str) -> str:
    """--help text with click's wrapping undone (it breaks after a flag's dash too)."""
    return re.sub(r"\s+", " ", re.sub(r"-\n\s+", "-", text))


def test_help_shows_a_switch_default_as_the_flag_in_effect() -> None:
    res = run_cli(["--help"])
    assert res.returncode == 0, res.stderr
    text = _unwrapped(res.stdout)
    assert "default: --collector.nvidia]" in text
    assert "default: --no-collector.ebpf]" in text
    assert "default: collector." not in text and "default: no-collector." not in text


def test_a_commands_help_points_at_the_flags_instead_of_repeating_them() -> None:
    full = run_cli(["--help"]).stdout
    for command in ("serve", "dump", "doctor", "check"):
        res = run_cli([command, "--help"])
        assert res.returncode == 0, res.stderr
        assert "--web.listen-address" not in res.stdout, command
        assert "gpu-exporter --help" in _unwrapped(res.stdout), command
        assert len(res.stdout.splitlines()) < 20 < len(full.splitlines())
    assert "--strict" in run_cli(["doctor", "--help"]).stdout  # its own flag is listed
    # the flags still apply after the command
    res = run_cli(["dump", "--no-collector.host"], NO_DEVICES)
    assert res.returncode == 0 and not find(parse(res.stdout), "system_cpu_utilization_ratio")


def test_a_bad_boolean_in_the_environment_names_the_words_it_takes() -> None:
    line = _refused(["check"], {"GPU_EXPORTER_COLLECTOR_AMD": "maybe"})
    assert "GPU_EXPORTER_COLLECTOR_AMD" in line and "'maybe'" in line
    assert "use true or false" in line and "values: ," not in line, line


@pytest.mark.parametrize("fmt", ["logfmt", "json"])
def test_a_misspelt_variable_is_a_warning_at_level_warn_with_the_name_it_is_close_to(
        fmt: str) -> None:
    res = run_cli([f"--log.format={fmt}", "dump"],
                  {**NO_DEVICES, "GPU_EXPORTER_SCRAPE_TIMOUT": "3"})
    assert res.returncode == 0, res.stderr
    warned = [line for line in res.stderr.splitlines() if "GPU_EXPORTER_" in line]
    assert len(warned) == 1, res.stderr  # not the known ones (GPU_EXPORTER_CHECK_LABELS...)
    assert "GPU_EXPORTER_SCRAPE_TIMOUT" in warned[0]
    assert "did you mean GPU_EXPORTER_SCRAPE_TIMEOUT?" in warned[0]
    # the level as --log.level spells it (Python's own name is "warning")
    if fmt == "json":
        assert json.loads(warned[0])["level"] == "warn"
    else:
        assert " level=warn " in warned[0]


def test_doctor_strict_fails_on_a_collector_the_host_should_have() -> None:
    # nothing turned off here: every collector that is on counts; no GPU on this host
    res = run_cli(["doctor", "--strict"], NO_DEVICES)
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip() == (
        "gpu-exporter: doctor --strict: nvidia, amd, intel, gaudi, power unavailable")
    assert "nvidia " in res.stdout  # the report itself is printed first
    # named by a flag (before or after the command) or a variable: only those count
    res = run_cli(["--collector.nvidia", "doctor", "--strict"], NO_DEVICES)
    assert (res.returncode, res.stderr.strip()) == (
        1, "gpu-exporter: doctor --strict: nvidia unavailable")
    res = run_cli(["doctor", "--strict"], {**NO_DEVICES, "GPU_EXPORTER_COLLECTOR_HOST": "1"})
    assert res.returncode == 0, res.stderr
    # without --strict, doctor reports and exits 0
    assert run_cli(["--collector.nvidia", "doctor"], NO_DEVICES).returncode == 0


@pytest.mark.parametrize(("args", "env", "named"), [
    (["check", "--path.sysfs=/nonexistent"], {}, "--path.sysfs=/nonexistent"),
    (["check"], {"GPU_EXPORTER_PATH_SYSFS": "/sys", "GPU_EXPORTER_PATH_PROCFS": "/nonexistent"},
     "--path.procfs=/nonexistent: no such directory (environment)"),
])
def test_check_refuses_a_path_that_is_not_a_directory(
        args: list[str], env: dict[str, str], named: str) -> None:
    line = _refused(args, env)
    assert named in line and "no such directory" in line, line
