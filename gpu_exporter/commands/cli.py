"""Command line: `gpu-exporter [serve]`, `dump`, `doctor`, `check`, `version`.

Every flag can also come from the environment as GPU_EXPORTER_<NAME> (upper case, dots
and dashes to underscores): `--scrape.timeout` is GPU_EXPORTER_SCRAPE_TIMEOUT; any other
GPU_EXPORTER_* variable is warned about at start (a misspelt one would do nothing).
Exit codes: 0 ok, 1 `doctor --strict` found a collector unavailable, 2 bad flag / value /
configuration, 3 cannot listen, 4 a collector fault (e.g. a BPF program that does not
load).
"""

from __future__ import annotations

import dataclasses
import difflib
import gc
import logging
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource
from click.types import BoolParamType

from gpu_exporter import __version__
from gpu_exporter.collectors import REGISTRY
from gpu_exporter.collectors.base import Availability, CollectorFault, Feature
from gpu_exporter.commands.gpu_actions import needs
from gpu_exporter.commands.gpu_actions import report as needs_report
from gpu_exporter.http.webconfig import WebConfig
from gpu_exporter.model import flagtypes, logs, metric_types
from gpu_exporter.model.settings import (
    PROCFS,
    RETRY_INTERVAL,
    SCRAPE_TIMEOUT,
    SYSFS,
    ConfigError,
    Option,
    Settings,
)
from gpu_exporter.scrape.exporter import GpuExporterCollector, make_registry
from gpu_exporter.scrape.resource import resource_labels

EXIT_UNAVAILABLE, EXIT_CONFIG, EXIT_LISTEN, EXIT_FAULT = 1, 2, 3, 4
log = logging.getLogger("gpu_exporter")


def env_name(flag: str) -> str:
    return "GPU_EXPORTER_" + flag.upper().replace(".", "_").replace("-", "_")


def param_name(flag: str) -> str:
    return flag.replace(".", "_").replace("-", "_")


if TYPE_CHECKING:
    _ParamType = click.ParamType[Any]
else:  # click before 8.2 has no generic ParamType
    _ParamType = click.ParamType


class _Bool(BoolParamType):
    """click's boolean, refusing a value with the words a person writes: click's own
    message lists every spelling it takes, starting with the empty string."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"{value!r} is not on or off: use true or false (or 1/0, yes/no, "
                      "on/off)", param, ctx)


class _Switch(click.Option):
    """An on/off flag whose --help default is the flag in effect (`--no-collector.ebpf`):
    click shows the flag's name without its dashes, `collector.ebpf`, which reads like a
    value (click 8.2 and later ask this method)."""

    def get_help_extra(self, ctx: click.Context) -> Any:
        extra = super().get_help_extra(ctx)
        if "default" in extra:
            extra["default"] = (self.opts if self.default else self.secondary_opts)[0]
        return extra


class _FlagType(_ParamType):
    """A flag type from a plain function; its ValueError message becomes the error."""

    def __init__(self, func: Callable[[str], Any]) -> None:
        self.func = func
        self.name = getattr(func, "__name__", type(func).__name__.lower())

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # a default, already of the type
        try:
            return self.func(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


GLOBAL_OPTIONS: tuple[Option[Any], ...] = (
    Option("web.listen-address", flagtypes.listen_address, ":9445",
           "Address to listen on, [host]:port."),
    Option("web.telemetry-path", flagtypes.telemetry_path, "/metrics",
           "Path under which to expose metrics."),
    Option("web.config.file", str, "",
           "Path to a Prometheus exporter-toolkit web config (TLS, basic auth, headers)."),
    Option("web.read-header-timeout", flagtypes.Seconds(0.1, 300), 10.0,
           "Seconds a client has to send a request's headers (and finish the TLS "
           "handshake); slower clients are disconnected."),
    SYSFS,
    PROCFS,
    SCRAPE_TIMEOUT,
    RETRY_INTERVAL,
    Option("log.level", click.Choice(["debug", "info", "warn", "error"]), "info",
           "Log level."),
    Option("log.format", click.Choice(["logfmt", "json"]), "logfmt", "Log format."),
)


# Environment variables other tools already use for one of our flags; ours wins if both
# are set.
EXTRA_ENVVARS: dict[str, tuple[str, ...]] = {
    "collector.ebpf": ("OTEL_GPU_EBPF_ENABLED",),
}
# GPU_EXPORTER_* variables that are not a flag's, by who reads them.
OTHER_ENVVARS = frozenset({
    metric_types.CHECK_LABELS_VAR,  # the test suite's label check
    "GPU_EXPORTER_HEALTHCHECK_CERT_FILE", "GPU_EXPORTER_HEALTHCHECK_KEY_FILE",  # healthcheck
    "GPU_EXPORTER_ARGS",  # extra flags, in the systemd unit's /etc/default/gpu-exporter
})


def _click_option(opt: Option[Any], hidden: bool = False) -> Callable[[Any], Any]:
    flag = opt.name
    kwargs: dict[str, Any] = {
        "default": opt.default, "show_default": True, "help": opt.help, "hidden": hidden,
        "envvar": [env_name(flag), *EXTRA_ENVVARS.get(flag, ())], "show_envvar": True,
    }
    if opt.is_flag:
        return click.option(f"--{flag}/--no-{flag}", param_name(flag), type=_Bool(),
                            cls=_Switch, **kwargs)
    if isinstance(opt.type, click.ParamType) or opt.type in (int, float, str):
        kwargs["type"] = opt.type
    else:
        kwargs["type"] = _FlagType(opt.type)
    return click.option(f"--{flag}", param_name(flag), **kwargs)


def collector_options() -> list[Option[Any]]:
    """Every collector's own options, once each (collectors may share one, as the PCI
    discovery options of amd and intel)."""
    return list(dict.fromkeys(o for cls in REGISTRY for o in cls.options))


def every_option() -> list[Option[Any]]:
    """Every flag: the global ones, one switch per collector, the collectors' own."""
    switches = [Option(f"collector.{cls.name}", bool, cls.default_enabled,
                       f"Enable the {cls.name} collector: {cls.help}", is_flag=True)
                for cls in REGISTRY]
    return [*GLOBAL_OPTIONS, *switches, *collector_options()]


def with_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed(every_option()):
        fn = _click_option(opt)(fn)
    return fn


def with_hidden_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A command's copy of every flag (they may come after the command too), left out of
    its --help, which points at `gpu-exporter --help` instead of repeating them all."""
    for opt in reversed(every_option()):
        fn = _click_option(opt, hidden=True)(fn)
    return fn


FLAGS_EPILOG = ("Every flag of `gpu-exporter --help` applies, before or after the "
                "command, and as its GPU_EXPORTER_* variable.")


def unknown_envvars(env: dict[str, str]) -> list[str]:
    """A warning for each GPU_EXPORTER_* variable that no flag reads (a misspelt one
    would otherwise be ignored without a word), with the name it is closest to."""
    known = {env_name(o.name) for o in every_option()} | OTHER_ENVVARS
    out = []
    for name in sorted(n for n in env if n.startswith("GPU_EXPORTER_") and n not in known):
        close = difflib.get_close_matches(name, sorted(known), n=1)
        out.append(f"unknown environment variable {name}, ignored"
                   + (f" (did you mean {close[0]}?)" if close else ""))
    return out


def _warn_unknown_envvars() -> None:
    for message in unknown_envvars(dict(os.environ)):
        log.warning("%s", message)


def build_settings(params: dict[str, Any], env: dict[str, str] | None = None) -> Settings:
    env = dict(os.environ if env is None else env)
    enabled = frozenset(
        cls.name for cls in REGISTRY if params.get(param_name("collector." + cls.name))
    )
    return Settings(
        sysfs=params[param_name(SYSFS.name)],
        procfs=params[param_name(PROCFS.name)],
        scrape_timeout_seconds=params[param_name(SCRAPE_TIMEOUT.name)],
        enabled_collectors=enabled,
        resource_labels=resource_labels(env),
        options={o.name: params[param_name(o.name)] for o in collector_options()},
        retry_interval_seconds=params[param_name(RETRY_INTERVAL.name)],
    )


def _fault(code: int, message: str) -> None:
    click.echo(f"gpu-exporter: {message}", err=True)
    sys.exit(code)


def _start(
    params: dict[str, Any],
    prepare: Callable[[GpuExporterCollector], None] | None = None,
    check_only: bool = False,
) -> GpuExporterCollector:
    logs.configure(params["log_level"], params["log_format"])
    _warn_unknown_envvars()
    try:
        settings = dataclasses.replace(build_settings(params), check_only=check_only)
    except ConfigError as exc:
        _fault(EXIT_CONFIG, str(exc))
    exporter = GpuExporterCollector(settings, REGISTRY)
    if prepare is not None:
        prepare(exporter)  # may fault (exit 2/3) before any collector starts or logs
    try:
        exporter.start()
    except CollectorFault as exc:
        exporter.close()
        _fault(EXIT_FAULT, str(exc))
    except ConfigError as exc:
        exporter.close()
        _fault(EXIT_CONFIG, str(exc))
    return exporter


def _web_config(params: dict[str, Any]) -> WebConfig:
    from gpu_exporter.http.webconfig import WebConfig, load_web_config

    if not params["web_config_file"]:
        return WebConfig()
    try:
        return load_web_config(params["web_config_file"])
    except ConfigError as exc:
        _fault(EXIT_CONFIG, str(exc))
        raise  # not reached: _fault exits


def _on_hangup(_signum: int, _frame: object) -> None:
    # SIGHUP's default action ends the process (a closed terminal, `kill -HUP` from a habit
    # of reloading daemons). exporter-toolkit does not reload on it either: the web config
    # is re-read when its file changes; flags need a restart.
    log.info("received signal SIGHUP: ignored (the web config file is re-read when it "
             "changes; restart to apply changed flags)")


def serve(params: dict[str, Any]) -> None:
    from gpu_exporter.http.app import ListenError, make_server
    from gpu_exporter.http.selfmetrics import HttpSelfMetrics
    from gpu_exporter.http.server import HttpServer

    # From the first moment: a SIGHUP while collectors start must not end the process.
    signal.signal(signal.SIGHUP, _on_hangup)
    # Checked before any collector starts: a bad file is a fault, not a half-start.
    web_config = _web_config(params)
    bound: list[HttpServer] = []

    def bind(exporter: GpuExporterCollector) -> None:
        # Bound before the collectors start: a bad address or a port in use is the one
        # line the operator sees, not the last of the collectors' start-up logs.
        registry = make_registry(exporter)
        try:
            bound.append(make_server(
                params["web_listen_address"], registry,
                params["web_telemetry_path"], web_config, params["web_read_header_timeout"],
            ))
        except ListenError as exc:
            _fault(EXIT_LISTEN, str(exc))
        # The HTTP front's self-metrics: a collector of its own, after the exporter's.
        registry.register(HttpSelfMetrics(bound[0].refusal_counts,
                                          exporter.settings.resource_labels))

    exporter = _start(params, prepare=bind)
    server = bound[0]
    # What start-up loaded lives as long as the process: kept out of the collector's
    # full passes, which otherwise land inside some scrapes (tests/bench: p99 halved).
    gc.freeze()
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received signal %s, shutting down", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    log.info("listening on %s%s (version %s, tls %s, basic auth %s)",
             params["web_listen_address"], params["web_telemetry_path"], __version__,
             "on" if web_config.tls else "off", "on" if web_config.auth_required else "off")
    stop.wait()
    server.shutdown()
    server.server_close()
    exporter.close()


VERSION = f"gpu-exporter, version {__version__}"


@click.group(invoke_without_command=True, context_settings={"max_content_width": 100})
@click.version_option(__version__, "-v", "--version", prog_name="gpu-exporter",
                      message=VERSION)
@with_options
@click.pass_context
def main(ctx: click.Context, /, **params: Any) -> None:
    """Prometheus exporter for GPU fleets. Without a command: serve."""
    if ctx.invoked_subcommand is None:
        serve(params)


def _with_flags_before(ctx: click.Context, params: dict[str, Any]) -> dict[str, Any]:
    """Flags given before the command apply to it (`gpu-exporter --collector.ebpf
    doctor`); a flag given on both sides takes the command's own value."""
    merged = dict(params)
    for name in params:
        if _source(ctx, name) == "flag before the command":
            merged[name] = ctx.parent.params[name]  # type: ignore[union-attr]
    return merged


def _source(ctx: click.Context, name: str) -> str:
    if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE:
        return "flag"
    if ctx.parent and ctx.parent.get_parameter_source(name) is ParameterSource.COMMANDLINE:
        return "flag before the command"
    if ctx.get_parameter_source(name) is ParameterSource.ENVIRONMENT:
        return "environment"
    return "default"


@main.command("serve", epilog=FLAGS_EPILOG)
@with_hidden_options
@click.pass_context
def serve_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Serve /metrics over HTTP (the default command)."""
    serve(_with_flags_before(ctx, params))


@main.command(epilog=FLAGS_EPILOG)
@with_hidden_options
@click.pass_context
def dump(ctx: click.Context, /, **params: Any) -> None:
    """Print one scrape in the Prometheus text format and exit."""
    from gpu_exporter.scrape.render import TextRenderer

    exporter = _start(_with_flags_before(ctx, params))
    try:
        # The renderer /metrics answers text 0.0.4 with (http/app.py): one code path for
        # both, byte for byte prometheus_client's generate_latest.
        sys.stdout.write(TextRenderer().render(make_registry(exporter)).decode())
    finally:
        exporter.close()


@main.command(epilog=FLAGS_EPILOG)
@with_hidden_options
@click.pass_context
@click.option("--strict", is_flag=True, default=False,
              help="Exit 1 when a collector that is on is unavailable: those named by a "
                   "flag or variable (--collector.nvidia, GPU_EXPORTER_COLLECTOR_EBPF=1), "
                   "or, with none named, every one that is on (for provisioning).")
def doctor(ctx: click.Context, /, strict: bool, **params: Any) -> None:
    """Tell, collector by collector, what is available and why not."""
    params = _with_flags_before(ctx, params)
    params["log_level"] = "error"
    exporter = _start(params, check_only=True)
    try:
        # One scrape first: what each GPU needs is read from its series.
        gpus = needs(make_registry(exporter).collect())
        features = exporter.availability()
        click.echo(doctor_report(features), nl=False)
        click.echo(needs_report(gpus), nl=False)
    finally:
        exporter.close()
    if strict:
        missing = strictly_missing(features, _named_collectors(ctx, params))
        if missing:
            _fault(EXIT_UNAVAILABLE, f"doctor --strict: {', '.join(missing)} unavailable")


def _named_collectors(ctx: click.Context, params: dict[str, Any]) -> set[str]:
    """The collectors turned on by a flag or variable (not by their default)."""
    return {cls.name for cls in REGISTRY
            if params[p := param_name(f"collector.{cls.name}")] and _source(ctx, p) != "default"}


def strictly_missing(features: list[Feature], named: set[str]) -> list[str]:
    """The collectors `doctor --strict` fails on: of those named (or, none named, of all
    that are on), each that is unavailable."""
    collectors = [f for f in features if "." not in f.name]
    wanted = [f for f in collectors if f.name in named] if named else \
        [f for f in collectors if f.availability.state != "disabled"]
    return [f.name for f in wanted if f.availability.state == "unavailable"]


@main.command(epilog=FLAGS_EPILOG)
@with_hidden_options
@click.pass_context
def check(ctx: click.Context, /, **params: Any) -> None:
    """Check the flags, the environment and the web config file as serve would, without
    starting anything, and print the settings in effect (exit 0; 2 on bad input)."""
    params = _with_flags_before(ctx, params)
    logs.configure(params["log_level"], params["log_format"])
    _warn_unknown_envvars()
    try:
        settings = build_settings(params)
    except ConfigError as exc:
        _fault(EXIT_CONFIG, str(exc))
    # serve runs without them (the collectors that need them are unavailable), but a
    # check of the flags says that a path names nothing
    for opt in (SYSFS, PROCFS):
        path = params[param_name(opt.name)]
        if not os.path.isdir(path):
            _fault(EXIT_CONFIG, f"--{opt.name}={path}: no such directory "
                                f"({_source(ctx, param_name(opt.name))})")
    web_config = _web_config(params)
    for opt in every_option():
        name = param_name(opt.name)
        value = params[name]
        if opt.is_flag:
            flag = f"--{opt.name}" if value else f"--no-{opt.name}"
        else:
            flag = f"--{opt.name}={shlex.quote(str(value))}"
        click.echo(f"{flag}  # {_source(ctx, name)}")
    labels = ", ".join(f'{k}="{v}"' for k, v in settings.resource_labels.items())
    click.echo(f"resource labels: {labels}")
    if params["web_config_file"]:
        click.echo(f"web config: {web_config.source} (tls "
                   f"{'on' if web_config.tls else 'off'}, basic auth "
                   f"{'on' if web_config.auth_required else 'off'})")


@main.command()
def version() -> None:
    """Print the version and exit (as --version and -v)."""
    click.echo(VERSION)


def doctor_report(features: list[Feature]) -> str:
    """One line per collector and feature: its state and why; where something is off, the
    fix on the next line. A per-device feature has one line per state, naming its GPUs."""
    groups: dict[tuple[str, Availability], list[str]] = {}  # in the order reported
    for f in features:
        groups.setdefault((f.name, f.availability), []).extend([f.hw_id] if f.hw_id else [])
    width = max((len(name) for name, _ in groups), default=10)
    lines = []
    for (name, a), ids in groups.items():
        indent = "  " if "." in name else ""
        reason = ", ".join(ids) + (f": {a.reason}" if a.reason else "") if ids else a.reason
        lines.append(f"{indent}{name:<{width}}  {a.state:<11}  {reason}".rstrip())
        if a.fix and a.state != "enabled":
            lines.append(f"{indent}{'':<{width}}  {'':<11}  fix: {a.fix}")
    return "\n".join(lines) + "\n"


def run() -> None:
    """Console entry point: a bad flag or value is one line on stderr and exit 2."""
    try:
        main(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"gpu-exporter: {exc.format_message()}", err=True)
        sys.exit(EXIT_CONFIG)
