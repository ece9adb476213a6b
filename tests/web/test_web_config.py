"""`--web.config.file` parsing: every bad file is exit 2 with one clear line, before any
collector starts; and the bcrypt check is cached on success only."""

from __future__ import annotations

import base64
import re
import threading
from pathlib import Path

import bcrypt
import pytest

from gpu_exporter.http.webconfig import BasicAuth, load_web_config
from gpu_exporter.model.settings import ConfigError
from tests.helpers import eventually, run_cli
from tests.web.certs import Certs
from tests.web.conftest import PASSWORD
from tests.web.serve import basic


def _bad_configs(certs: Certs, folder: Path) -> dict[str, tuple[str, str]]:
    cert, key, ca = certs.server.cert, certs.server.key, certs.ca.cert
    (folder / "garbage.pem").write_text("not a certificate\n")
    tls = f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
    return {
        # name: (file content, a part of the expected message)
        "yaml": ("tls_server_config: [unclosed\n", "not valid YAML at line"),
        "top key": ("tls_config:\n  cert_file: x\n", "unknown key 'tls_config'"),
        "tls key": (tls + "  certfile: x\n", "unknown key 'certfile' in tls_server_config"),
        "no key": (f"tls_server_config:\n  cert_file: {cert}\n", "missing key_file"),
        "missing file": (f"tls_server_config:\n  cert_file: {folder}/nope.crt\n"
                         f"  key_file: {key}\n", "nope.crt"),
        "bad cert": (f"tls_server_config:\n  cert_file: {folder}/garbage.pem\n"
                     f"  key_file: {key}\n", "cannot load certificate"),
        "key mismatch": (f"tls_server_config:\n  cert_file: {cert}\n"
                         f"  key_file: {certs.client.key}\n", "cannot load certificate"),
        "auth type": (tls + "  client_auth_type: Sometimes\n",
                      "client_auth_type 'Sometimes' is not one of"),
        "ca without policy": (tls + f"  client_ca_file: {ca}\n",
                              "client_ca_file is set but client_auth_type is NoClientCert"),
        "policy without ca": (tls + "  client_auth_type: RequireAndVerifyClientCert\n",
                              "needs client_ca_file"),
        "version": (tls + "  min_version: TLS14\n", "min_version 'TLS14' is not one of"),
        "cipher": (tls + "  cipher_suites: [TLS_FOO]\n", "unknown cipher suite 'TLS_FOO'"),
        "curves": (tls + "  curve_preferences: [X25519]\n", "curve_preferences is not supported"),
        "hash": ("basic_auth_users:\n  prometheus: hunter2\n",
                 "basic_auth_users.prometheus: not a bcrypt hash"),
        "header": ("http_server_config:\n  headers:\n    Server: evil\n",
                   "header 'Server' cannot be configured"),
        "header value": ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
                         "X-Frame-Options 'allow' must be one of"),
        "not a mapping": ("- a\n- b\n", "the file must be a mapping"),
    }


def test_every_invalid_web_config_is_one_clear_line(certs: Certs, folder: Path) -> None:
    for name, (content, expected) in _bad_configs(certs, folder).items():
        path = folder / f"{name.replace(' ', '-')}.yml"
        path.write_text(content)
        with pytest.raises(ConfigError) as err:
            load_web_config(str(path))
        message = str(err.value)
        assert "\n" not in message, (name, message)
        assert message.startswith(f"invalid --web.config.file {path}: "), message
        assert expected in message, (name, message)


def test_invalid_web_config_is_exit_2_before_collectors_start(certs: Certs,
                                                              folder: Path) -> None:
    cases = _bad_configs(certs, folder)
    for name in ("yaml", "bad cert", "hash"):
        content, expected = cases[name]
        path = folder / f"{name.replace(' ', '-')}.yml"
        path.write_text(content)
        # The config is refused before anything listens: the port is never used.
        res = run_cli([f"--web.config.file={path}", "--web.listen-address=127.0.0.1:9"],
                      timeout=30)
        assert res.returncode == 2, (name, res.returncode, res.stderr)
        lines = res.stderr.strip().splitlines()
        # One line, and nothing logged before it: no collector was started.
        assert len(lines) == 1, (name, res.stderr)
        assert lines[0].startswith(f"gpu-exporter: invalid --web.config.file {path}: "), lines
        assert expected in lines[0], (name, lines[0])


def test_missing_web_config_file_and_env_variable(folder: Path) -> None:
    res = run_cli([], env={"GPU_EXPORTER_WEB_CONFIG_FILE": str(folder / "absent.yml")})
    assert res.returncode == 2
    assert "absent.yml: No such file or directory" in res.stderr


def test_valid_config_parses_to_settings(certs: Certs, folder: Path,
                                         password_hash: str) -> None:
    # Relative paths are relative to the config file, as in exporter-toolkit.
    (folder / "tls").mkdir()
    for src, dst in ((certs.server.cert, "tls/s.crt"), (certs.server.key, "tls/s.key"),
                     (certs.ca.cert, "tls/ca.crt")):
        (folder / dst).write_bytes(src.read_bytes())
    path = folder / "web.yml"
    path.write_text(
        "tls_server_config:\n  cert_file: tls/s.crt\n  key_file: tls/s.key\n"
        "  client_ca_file: tls/ca.crt\n  client_auth_type: RequireClientCert\n"
        "  min_version: TLS13\n"
        "  cipher_suites: [TLS_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n"
        "http_server_config:\n  http2: true\n  headers:\n    x-content-type-options: nosniff\n"
        f"basic_auth_users:\n  prometheus: '{password_hash}'\n"
    )
    cfg = load_web_config(str(path))
    assert cfg.tls is not None
    assert cfg.tls.cert_file == str(folder / "tls/s.crt")
    assert cfg.tls.client_auth_type == "RequireAnyClientCert"
    assert cfg.tls.min_version == "TLS13"
    assert cfg.tls.cipher_suites == ("ECDHE-RSA-AES128-GCM-SHA256",)
    assert cfg.headers == {"X-Content-Type-Options": "nosniff"}
    assert cfg.basic_auth_users == {"prometheus": password_hash.encode()}
    assert cfg.auth_required


def test_empty_file_means_no_tls_no_auth(folder: Path) -> None:
    path = folder / "empty.yml"
    path.write_text("")
    cfg = load_web_config(str(path))
    assert cfg.tls is None and not cfg.auth_required and not cfg.headers


def test_bad_config_raises_config_error_in_process(folder: Path) -> None:
    path = folder / "w.yml"
    path.write_text("basic_auth_users: [a, b]\n")
    with pytest.raises(ConfigError, match="basic_auth_users must be a mapping"):
        load_web_config(str(path))


def _header(user: str, password: str) -> str:
    return basic(user, password)["Authorization"]


@pytest.fixture
def bcrypt_calls(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The hashes bcrypt.checkpw is asked about, in order."""
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counting)  # webconfig imports it on first use
    return calls


def test_bcrypt_runs_once_per_credentials_and_never_caches_failures(
        bcrypt_calls: list[bytes], password_hash: str) -> None:
    calls = bcrypt_calls
    auth = BasicAuth({"prometheus": password_hash.encode()})
    good = _header("prometheus", PASSWORD)
    for _ in range(5):
        assert auth.check(good)
    assert len(calls) == 1  # one bcrypt, then the cache

    for _ in range(3):
        assert not auth.check(_header("prometheus", "wrong"))
    assert len(calls) == 4  # every failure pays a full bcrypt

    # An unknown user costs a bcrypt too (against a decoy hash): timing tells nothing.
    assert not auth.check(_header("nobody", PASSWORD))
    assert len(calls) == 5 and calls[-1] != password_hash.encode()
    # The decoy's own password does not let an unknown user in.
    assert not auth.check(_header("nobody", "fakepassword"))

    # A different password for the same user is not served from the cache.
    assert not auth.check(_header("prometheus", PASSWORD + " "))


def test_cached_success_expires(bcrypt_calls: list[bytes], password_hash: str) -> None:
    calls = bcrypt_calls
    auth = BasicAuth({"prometheus": password_hash.encode()}, cache_seconds=0.0)
    assert auth.check(_header("prometheus", PASSWORD))
    assert auth.check(_header("prometheus", PASSWORD))
    assert len(calls) == 2  # expired at once: checked again
    assert not auth.check(None)
    assert not auth.check("Basic")
    assert not auth.check("Basic " + base64.b64encode(b"no-colon").decode())
    assert len(calls) == 2  # malformed headers are refused before any bcrypt


def _cost(hashed: bytes) -> int:
    return int(hashed.split(b"$")[2])


def test_an_unknown_user_costs_the_users_bcrypt_cost(bcrypt_calls: list[bytes]) -> None:
    # The decoy of an unknown user is as slow as the real hashes (was: always cost 10, so
    # with cost 12 a wrong user answered in a quarter of a wrong password's time).
    for costs in ((5,), (5, 6)):
        users = {f"u{c}": bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=c)) for c in costs}
        auth = BasicAuth(users)
        assert not auth.check(_header("nobody", "pw"))
        assert _cost(bcrypt_calls[-1]) == max(costs), bcrypt_calls[-1]
        assert not auth.check(_header("u5", "wrong"))
        assert _cost(bcrypt_calls[-1]) == 5


def test_the_documented_recipe_and_the_decoy_agree(bcrypt_calls: list[bytes],
                                               folder: Path) -> None:
    from tests.helpers import REPO

    readme = (REPO / "docs" / "tls-auth.md").read_text()
    # The recipe: bcrypt.gensalt() (its default cost) or htpasswd -nBC <cost>.
    assert "bcrypt.gensalt()" in readme
    htpasswd = {int(c) for c in re.findall(r"htpasswd -nBC (\d+)", readme)}
    default = _cost(bcrypt.gensalt())
    assert htpasswd == {default}, (htpasswd, default)
    # The one-line error for a bad hash gives the same recipe.
    path = folder / "plain.yml"
    path.write_text("basic_auth_users:\n  u: plain\n")
    with pytest.raises(ConfigError) as err:
        load_web_config(str(path))
    assert f"htpasswd -nBC {default}" in str(err.value)
    # A hash made by the recipe, and an unknown user: the same cost.
    auth = BasicAuth({"prometheus": bcrypt.hashpw(b"pw", bcrypt.gensalt())})
    assert not auth.check(_header("nobody", "pw"))
    assert _cost(bcrypt_calls[-1]) == default


def test_credentials_that_passed_before_are_checked_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Forty clients keep bcrypt busy with wrong passwords; a scraper whose success has
    expired (cache_seconds=0) is checked before every one of them that waits (was: one
    lock, the scraper waited behind a random share of the forty)."""
    good = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=8))
    auth = BasicAuth({"prometheus": good}, cache_seconds=0.0)
    started: list[str] = []  # who each bcrypt check was for, in the order they began
    lock = threading.Lock()
    real = bcrypt.checkpw

    def recording(password: bytes, hashed: bytes) -> bool:
        with lock:
            started.append("scraper" if password == b"right" else "attacker")
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", recording)
    right = _header("prometheus", "right")
    assert auth.check(right)  # passed once: from now on it is known good
    stop = threading.Event()

    def attacker(n: int) -> None:
        for i in range(60):
            if stop.is_set():
                return
            auth.check(_header("prometheus", f"wrong-{n}-{i}"))

    attackers = [threading.Thread(target=attacker, args=(n,)) for n in range(40)]
    for a in attackers:
        a.start()
    try:
        eventually(lambda: started.count("attacker") >= 40, 30, "the attackers got going",
                   interval=0.01)
        overtaken = []
        for _ in range(5):
            with lock:
                mark = len(started)
            assert auth.check(right)
            with lock:
                after = started[mark:]
            # Attackers' checks that began after the scraper asked and before its own.
            overtaken.append(after.index("scraper"))
    finally:
        stop.set()
        for a in attackers:
            a.join(60)
    # At most the checks already being handed to a free thread as it asked.
    assert max(overtaken) <= 2, overtaken


def _hostile_configs(folder: Path) -> dict[str, tuple[bytes, str]]:
    """Files `check` once accepted and `serve` could not run (issue 32, item 5), and
    others that never parsed: each with a part of the one line both give."""
    cheap = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()

    def user(hashed: str) -> bytes:
        return f"basic_auth_users:\n  prometheus: '{hashed}'\n".encode()

    def cost(n: str) -> str:
        return cheap[:4] + n + cheap[6:]

    aliases = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(9))
    return {
        # a 500 and a traceback per request, was
        "prefix $2$": (user("$2$" + cheap[4:]), "bcrypt prefix $2$ is not one of"),
        "garbage hash": (user("$2b$04$" + "z" * 53), "bcrypt cannot read this hash"),
        # a traceback and exit 1, was
        "cost 03": (user(cost("03")), "bcrypt cost 3 is below bcrypt's minimum 4"),
        "cost 99": (user(cost("99")), "bcrypt cost 99 is above the 14"),
        # serve never listened, was (the decoy hash, made at start at cost 31)
        "cost 31": (user(cost("31")), "bcrypt cost 31 is above the 14"),
        "cost 15": (user(cost("15")), "bcrypt cost 15 is above the 14"),
        # a traceback and exit 1, was
        "deep": (b"basic_auth_users: " + b"[" * 50_000 + b"]" * 50_000 + b"\n",
                 "nested too deeply"),
        "not utf-8": (b"basic_auth_users:\n  caf\xe9: x\n", "not UTF-8 (byte 23"),
        "aliases": (aliases.encode(), "unknown key 'a'"),
        "huge": (b"#" * (1 << 20) + b"\n", "larger than 1024 KiB"),
        "plain text": (user("hunter2"), "not a bcrypt hash"),
    }


def test_hostile_web_configs_are_refused_alike_by_check_and_serve(folder: Path) -> None:
    """The table of issue 32: for each file `check` and `serve` both exit 2 with the same
    one line, within seconds (cost 31 hung `serve`), and nothing else on stderr."""
    from tests.helpers import free_port

    # No GPU of any kind; sysfs a folder that exists (check refuses one that does not).
    no_devices = {"LD_LIBRARY_PATH": "/nonexistent", "GPU_EXPORTER_PATH_SYSFS": str(folder)}
    for name, (content, expected) in _hostile_configs(folder).items():
        path = folder / f"{name.replace(' ', '-').replace('$', '')}.yml"
        path.write_bytes(content)
        with pytest.raises(ConfigError) as err:
            load_web_config(str(path))
        assert expected in str(err.value), (name, str(err.value))
        lines = {}
        for command in (["check"], []):
            res = run_cli([*command, f"--web.config.file={path}",
                           f"--web.listen-address=127.0.0.1:{free_port()}"],
                          env=no_devices, timeout=30)
            assert res.returncode == 2, (name, command, res.returncode, res.stderr[-2000:])
            assert "Traceback" not in res.stderr, (name, command, res.stderr[-2000:])
            out = res.stderr.strip().splitlines()
            assert len(out) == 1, (name, command, res.stderr[-2000:])
            lines[tuple(command)] = out[0]
        assert lines[("check",)] == lines[()], (name, lines)
        assert lines[()] == f"gpu-exporter: {err.value}", (name, lines)


def test_the_cost_cap_is_served_and_one_above_is_not(folder: Path) -> None:
    """Cost 14 (the cap) loads: its decoy is made in one check's time; 15 is refused
    before bcrypt ever runs at that cost."""
    from gpu_exporter.http.webconfig import MAX_BCRYPT_COST

    assert MAX_BCRYPT_COST == 14
    cheap = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    path = folder / "cap.yml"
    path.write_text(f"basic_auth_users:\n  p: '{cheap[:4]}14{cheap[6:]}'\n")
    assert load_web_config(str(path)).auth_required
