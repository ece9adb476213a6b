"""`--web.config.file`: the Prometheus exporter-toolkit web configuration (TLS, basic auth,
response headers), so the file users already write for node_exporter works unchanged.

Everything is checked at start-up: a key the toolkit does not know, a missing file, a bad
certificate or a hash that is not bcrypt is a `ConfigError` naming the file and the key.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import os
import re
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_exporter.http.authlimits import AuthBusy, AuthLimited, FailureBudget, FairChecks
from gpu_exporter.model.settings import ConfigError

__all__ = ["AuthBusy", "AuthLimited", "BasicAuth", "WebConfig", "load_web_config"]

# yaml and bcrypt (about 2 MiB resident) are imported where a web config file is loaded
# and a password checked: most exporters run without one.

CLIENT_AUTH_TYPES = (
    "NoClientCert", "RequestClientCert", "RequireAnyClientCert",
    "VerifyClientCertIfGiven", "RequireAndVerifyClientCert",
)
# exporter-toolkit still accepts this older spelling of RequireAnyClientCert.
_CLIENT_AUTH_ALIASES = {"RequireClientCert": "RequireAnyClientCert", "": "NoClientCert"}

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3,
}

# Go's crypto/tls names (what exporter-toolkit configs use) -> OpenSSL names.
GO_CIPHER_SUITES = {
    "TLS_RSA_WITH_RC4_128_SHA": "RC4-SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": "ECDHE-ECDSA-RC4-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": "ECDHE-RSA-RC4-SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
# Go does not let TLS 1.3 suites be chosen either: named in a config they are accepted and
# have no effect, the same here.
TLS13_SUITES = frozenset({
    "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
})

# The headers exporter-toolkit lets a config set, with the values it allows (None: any).
ALLOWED_HEADERS: Mapping[str, frozenset[str] | None] = {
    "Strict-Transport-Security": None,
    "Content-Security-Policy": None,
    "X-Frame-Options": frozenset({"deny", "sameorigin"}),
    "X-Content-Type-Options": frozenset({"nosniff"}),
    "X-XSS-Protection": None,
}

_BCRYPT_HASH = re.compile(r"^\$(?P<prefix>[^$]*)\$(?P<cost>\d\d)\$[./A-Za-z0-9]{53}$")
# The prefixes bcrypt (the Python library) reads; `$2$` (the first, 1999 version) it
# does not, and every check against such a hash would fail with an error.
_BCRYPT_PREFIXES = ("2a", "2b", "2x", "2y")
# bcrypt's own minimum; the maximum is gpu-exporter's (bcrypt reads up to 31). A check runs
# on the one bcrypt thread and a scraper whose cached success expired waits for the check
# in progress, then its own: two checks must fit in Prometheus' 10 s scrape timeout on a
# busy node. Cost 14 took 0.9 s on the shared 2-core VM, 2.0 s loaded (16: 3.6 s and
# 7.5 s; 31: about 3 days): docs/web-front.md, "bcrypt costs: 4 to 14". exporter-toolkit
# (Go's bcrypt) accepts up to 31, and a login at such a cost holds its worker as long.
MIN_BCRYPT_COST = 4
MAX_BCRYPT_COST = 14
# A web config is a few hundred bytes; the cap only keeps a wrong path (a log, an image)
# from being read whole.
MAX_CONFIG_BYTES = 1 << 20
_BCRYPT_MAX_PASSWORD_BYTES = 72

_TOP_KEYS = frozenset({"tls_server_config", "http_server_config", "basic_auth_users"})
_TLS_KEYS = frozenset({
    "cert", "cert_file", "key", "key_file", "client_ca", "client_ca_file",
    "client_auth_type", "client_allowed_sans", "cipher_suites", "curve_preferences",
    "min_version", "max_version", "prefer_server_cipher_suites",
})
_HTTP_KEYS = frozenset({"http2", "headers"})


@dataclass(frozen=True)
class TLSSettings:
    cert_file: str
    key_file: str
    client_auth_type: str = "NoClientCert"
    client_ca_file: str | None = None
    client_allowed_sans: tuple[str, ...] = ()
    min_version: str = "TLS12"
    max_version: str | None = None
    # OpenSSL names, already translated from Go's.
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True


@dataclass(frozen=True)
class WebConfig:
    source: str = ""
    tls: TLSSettings | None = None
    # user -> bcrypt hash
    basic_auth_users: Mapping[str, bytes] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def auth_required(self) -> bool:
        return bool(self.basic_auth_users)


def _fail(source: str, message: str) -> ConfigError:
    return ConfigError(f"invalid --web.config.file {source}: {message}")


def _mapping(source: str, value: Any, where: str, keys: frozenset[str] | None) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(source, f"{where} must be a mapping, got {type(value).__name__}")
    if keys is not None:
        unknown = sorted(str(k) for k in value if k not in keys)
        if unknown:
            raise _fail(source, f"unknown key {unknown[0]!r} in {where} "
                                f"(known: {', '.join(sorted(keys))})")
    return value


def _string(source: str, value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(source, f"{where} must be a non-empty string")
    return value


def _readable_file(source: str, base: Path, value: Any, where: str) -> str:
    path = Path(_string(source, value, where))
    # Relative paths are relative to the config file, as in exporter-toolkit.
    if not path.is_absolute():
        path = base / path
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise _fail(source, f"{where} {str(path)!r}: {exc.strerror or exc}") from None
    return str(path)


def _parse_tls(source: str, base: Path, raw: dict[str, Any]) -> TLSSettings | None:
    if not raw:
        return None
    for inline in ("cert", "key", "client_ca"):
        if raw.get(inline):
            raise _fail(source, f"tls_server_config.{inline} (inline PEM) is not supported: "
                                f"put it in a file and use {inline}_file")
    for required in ("cert_file", "key_file"):
        if not raw.get(required):
            raise _fail(source, f"tls_server_config: missing {required}")
    cert = _readable_file(source, base, raw["cert_file"], "tls_server_config.cert_file")
    key = _readable_file(source, base, raw["key_file"], "tls_server_config.key_file")
    ca = None
    if raw.get("client_ca_file"):
        ca = _readable_file(source, base, raw["client_ca_file"],
                            "tls_server_config.client_ca_file")
    settings = _tls_settings(source, raw, cert, key, ca)
    # Loading now turns a bad certificate, key or CA into a start-up error.
    build_ssl_context(settings, source)
    return settings


def _tls_settings(source: str, raw: dict[str, Any], cert: str, key: str,
                  ca: str | None) -> TLSSettings:
    auth = raw.get("client_auth_type") or ""
    if not isinstance(auth, str):
        raise _fail(source, "tls_server_config.client_auth_type must be a string")
    auth = _CLIENT_AUTH_ALIASES.get(auth, auth)
    if auth not in CLIENT_AUTH_TYPES:
        raise _fail(source, f"tls_server_config.client_auth_type {auth!r} is not one of "
                            f"{', '.join(CLIENT_AUTH_TYPES)}")
    if ca and auth == "NoClientCert":
        raise _fail(source, "tls_server_config.client_ca_file is set but client_auth_type is "
                            "NoClientCert: set client_auth_type (e.g. RequireAndVerifyClientCert)")
    if auth in ("RequireAnyClientCert", "VerifyClientCertIfGiven",
                "RequireAndVerifyClientCert") and not ca:
        # Python's ssl verifies every client certificate it accepts, so a policy that asks
        # for one needs the CA to verify it against.
        raise _fail(source, f"tls_server_config.client_auth_type {auth} needs client_ca_file")

    versions = {}
    for k in ("min_version", "max_version"):
        v = raw.get(k)
        if v is None:
            continue
        if v not in TLS_VERSIONS:
            raise _fail(source, f"tls_server_config.{k} {v!r} is not one of "
                                f"{', '.join(TLS_VERSIONS)}")
        versions[k] = str(v)
    min_v = versions.get("min_version", "TLS12")
    max_v = versions.get("max_version")
    if max_v and TLS_VERSIONS[max_v] < TLS_VERSIONS[min_v]:
        raise _fail(source, f"tls_server_config.max_version {max_v} is below min_version {min_v}")

    suites_raw = raw.get("cipher_suites") or []
    if not isinstance(suites_raw, list):
        raise _fail(source, "tls_server_config.cipher_suites must be a list")
    suites = []
    for name in suites_raw:
        if name in GO_CIPHER_SUITES:
            suites.append(GO_CIPHER_SUITES[name])
        elif name not in TLS13_SUITES:
            raise _fail(source, f"tls_server_config.cipher_suites: unknown cipher suite "
                                f"{name!r} (use Go's names, e.g. "
                                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)")

    if raw.get("curve_preferences"):
        # ssl offers no way to order several curves; refusing beats silently ignoring a
        # security setting.
        raise _fail(source, "tls_server_config.curve_preferences is not supported by "
                            "gpu-exporter: remove it (OpenSSL's default curves apply)")

    sans_raw = raw.get("client_allowed_sans") or []
    if not isinstance(sans_raw, list) or not all(isinstance(s, str) for s in sans_raw):
        raise _fail(source, "tls_server_config.client_allowed_sans must be a list of strings")
    if sans_raw and auth != "RequireAndVerifyClientCert":
        raise _fail(source, "tls_server_config.client_allowed_sans needs client_auth_type "
                            "RequireAndVerifyClientCert")

    prefer = raw.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise _fail(source, "tls_server_config.prefer_server_cipher_suites must be true/false")

    return TLSSettings(
        cert_file=cert, key_file=key, client_auth_type=auth, client_ca_file=ca,
        client_allowed_sans=tuple(sans_raw), min_version=min_v, max_version=max_v,
        cipher_suites=tuple(suites), prefer_server_cipher_suites=prefer,
    )


def build_ssl_context(tls: TLSSettings, source: str = "") -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.minimum_version = TLS_VERSIONS[tls.min_version]
        if tls.max_version:
            ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    except (ValueError, ssl.SSLError) as exc:
        raise _fail(source, f"tls_server_config: TLS version not available: {exc}") from None
    try:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    except (ssl.SSLError, OSError) as exc:
        raise _fail(source, f"tls_server_config: cannot load certificate {tls.cert_file!r} "
                            f"with key {tls.key_file!r}: {exc}") from None
    if tls.client_ca_file:
        try:
            ctx.load_verify_locations(cafile=tls.client_ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise _fail(source, f"tls_server_config: cannot load client_ca_file "
                                f"{tls.client_ca_file!r}: {exc}") from None
    ctx.verify_mode = {
        "NoClientCert": ssl.CERT_NONE,
        # Without a CA there is nothing to verify against and the exporter never reads an
        # unverified certificate, so asking for one changes nothing observable.
        "RequestClientCert": ssl.CERT_OPTIONAL if tls.client_ca_file else ssl.CERT_NONE,
        "RequireAnyClientCert": ssl.CERT_REQUIRED,
        "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
        "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
    }[tls.client_auth_type]
    if tls.cipher_suites:
        try:
            ctx.set_ciphers(":".join(tls.cipher_suites))
        except ssl.SSLError:
            raise _fail(source, "tls_server_config.cipher_suites: none of the listed suites "
                                "is available in this OpenSSL") from None
    if tls.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    return ctx


_RECIPE = ("(make one with `htpasswd -nBC 12 \"\" | tr -d ':\\n'` or "
           "`python3 -c 'import bcrypt; print(bcrypt.hashpw(b\"...\", "
           "bcrypt.gensalt()).decode())'`)")


def _parse_users(source: str, raw: dict[str, Any]) -> dict[str, bytes]:
    users = {}
    for user, hashed in raw.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise _fail(source, f"basic_auth_users: invalid user name {user!r}")
        where = f"basic_auth_users.{user}"
        match = _BCRYPT_HASH.match(hashed) if isinstance(hashed, str) else None
        if match is None:
            raise _fail(source, f"{where}: not a bcrypt hash {_RECIPE}")
        if match["prefix"] not in _BCRYPT_PREFIXES:
            raise _fail(source, f"{where}: bcrypt prefix ${match['prefix']}$ is not one of "
                                f"{', '.join('$' + p + '$' for p in _BCRYPT_PREFIXES)} "
                                f"{_RECIPE}")
        cost = int(match["cost"])
        if cost < MIN_BCRYPT_COST:
            raise _fail(source, f"{where}: bcrypt cost {cost} is below bcrypt's minimum "
                                f"{MIN_BCRYPT_COST} {_RECIPE}")
        if cost > MAX_BCRYPT_COST:
            raise _fail(source, f"{where}: bcrypt cost {cost} is above the {MAX_BCRYPT_COST} "
                                "gpu-exporter serves (each further step doubles a check's "
                                f"time; {MAX_BCRYPT_COST} takes about a second) {_RECIPE}")
        _readable_by_bcrypt(source, where, hashed.encode(), match["cost"])
        users[user] = hashed.encode()
    return users


def _readable_by_bcrypt(source: str, where: str, hashed: bytes, cost: str) -> None:
    """bcrypt reads the salt and hash (checked at the lowest cost: a millisecond), so a
    hash of the right shape that bcrypt cannot read is refused here, not per request."""
    import bcrypt

    cheap = hashed.replace(f"${cost}$".encode(), f"${MIN_BCRYPT_COST:02d}$".encode(), 1)
    try:
        bcrypt.checkpw(b"", cheap)
    except ValueError as exc:
        raise _fail(source, f"{where}: bcrypt cannot read this hash ({exc}) "
                            f"{_RECIPE}") from None


def _parse_headers(source: str, raw: dict[str, Any]) -> dict[str, str]:
    headers = {}
    allowed_lower = {k.lower(): k for k in ALLOWED_HEADERS}
    for name, val in raw.items():
        canonical = allowed_lower.get(str(name).lower())
        if canonical is None:
            raise _fail(source, f"http_server_config.headers: header {name!r} cannot be "
                                f"configured (allowed: {', '.join(ALLOWED_HEADERS)})")
        if not isinstance(val, str) or "\n" in val or "\r" in val:
            raise _fail(source, f"http_server_config.headers.{name} must be a one-line string")
        choices = ALLOWED_HEADERS[canonical]
        if choices is not None and val.lower() not in choices:
            raise _fail(source, f"http_server_config.headers.{name} {val!r} must be one of "
                                f"{', '.join(sorted(choices))}")
        headers[canonical] = val
    return headers


def load_web_config(path: str) -> WebConfig:
    """Parse and check the file; every problem is one ConfigError line naming the file."""
    source = path
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise _fail(source, exc.strerror or str(exc)) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise _fail(source, f"larger than {MAX_CONFIG_BYTES // 1024} KiB: not a web config")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(source, f"not UTF-8 (byte {exc.start}: {data[exc.start:exc.start + 1]!r})"
                    ) from None
    import yaml

    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise _fail(source, f"not valid YAML{where}: {problem}") from None
    except RecursionError:
        # PyYAML composes nested nodes recursively: Python's recursion limit is its depth
        # limit (a web config is three levels deep).
        raise _fail(source, "nested too deeply (a web config is three levels deep)") from None
    top = _mapping(source, raw, "the file", _TOP_KEYS)
    base = Path(path).resolve().parent
    tls = _parse_tls(source, base, _mapping(source, top.get("tls_server_config"),
                                            "tls_server_config", _TLS_KEYS))
    http = _mapping(source, top.get("http_server_config"), "http_server_config", _HTTP_KEYS)
    if "http2" in http and not isinstance(http["http2"], bool):
        raise _fail(source, "http_server_config.http2 must be true/false")
    headers = _parse_headers(source, _mapping(source, http.get("headers"),
                                              "http_server_config.headers", None))
    users = _parse_users(source, _mapping(source, top.get("basic_auth_users"),
                                          "basic_auth_users", None))
    return WebConfig(source=source, tls=tls, basic_auth_users=users, headers=headers)


class CertificateReloader:
    """The SSLContext for each new connection, rebuilt when the certificate, key or CA file
    changes on disk, so a renewed certificate (cert-manager, certbot) is served without a
    restart. A renewal that does not load keeps the previous context and is reported once."""

    def __init__(self, tls: TLSSettings, on_error: Callable[[str], None]) -> None:
        self._tls = tls
        self._on_error = on_error
        self._lock = threading.Lock()
        self._stamp = self._files_stamp()
        self._ctx = build_ssl_context(tls)
        self._checked = time.monotonic()
        self._bad_stamp: tuple[float, ...] | None = None

    def _files_stamp(self) -> tuple[float, ...]:
        out: list[float] = []
        for f in (self._tls.cert_file, self._tls.key_file, self._tls.client_ca_file):
            if f:
                try:
                    st = os.stat(f)
                    out.extend((st.st_mtime, float(st.st_size), float(st.st_ino)))
                except OSError:
                    out.append(-1.0)
        return tuple(out)

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        # A stat per file per second at most, not per connection.
        if now - self._checked < 1.0:
            return self._ctx
        with self._lock:
            self._checked = now
            stamp = self._files_stamp()
            if stamp != self._stamp and stamp != self._bad_stamp:
                try:
                    self._ctx = build_ssl_context(self._tls)
                    self._stamp = stamp
                    self._bad_stamp = None
                except ConfigError as exc:
                    self._bad_stamp = stamp
                    self._on_error(f"keeping the previous certificate: {exc}")
            return self._ctx


@dataclass(frozen=True)
class _Attempt:
    user: bytes
    password: bytes
    target: bytes  # the user's hash, or the decoy for an unknown user
    known: bool
    key: bytes
    cached: bool  # passed within cache_seconds: no bcrypt at all
    vouched: bool  # passed before, longer ago: checked ahead of the others


class BasicAuth:
    """Checks `Authorization: Basic` against bcrypt hashes.

    A bcrypt check costs tens to hundreds of milliseconds of CPU by design; a scraper
    sends the same credentials every scrape, so a success is remembered for
    `cache_seconds` (keyed by a SHA-256 of user, hash and password, never the password
    itself). Failures are not remembered. Checks run on a bounded pool with a bounded
    queue; credentials that passed before are checked first, so clients sending wrong
    passwords cannot starve a scraper whose cached success has expired. An unknown user
    is checked against a decoy hash of the users' own bcrypt cost, so the time of an
    answer does not tell whether the user exists."""

    def __init__(self, users: Mapping[str, bytes], cache_seconds: float = 60.0,
                 cache_size: int = 256, checks: FairChecks | None = None,
                 budget: FailureBudget | None = None) -> None:
        import bcrypt

        self._users = dict(users)
        self._cache: dict[bytes, float] = {}  # key -> when its success expires
        self._cache_seconds = cache_seconds
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()
        # Shared with the BasicAuth of a reloaded config: one bcrypt thread, one budget.
        self.checks = checks if checks is not None else FairChecks()
        self.budget = budget if budget is not None else FailureBudget()
        # Every hash was checked (load_web_config) to be at most MAX_BCRYPT_COST: the
        # decoy takes one check's time to make, seconds at most.
        self.decoy_cost = max((_cost(h) for h in self._users.values()), default=10)
        # Made at start-up (one check's time), from a random password nobody knows.
        self._decoy = bcrypt.hashpw(os.urandom(18).hex().encode(),
                                    bcrypt.gensalt(rounds=self.decoy_cost))

    def _key(self, user: bytes, hashed: bytes, password: bytes) -> bytes:
        h = hashlib.sha256()
        for part in (user, hashed, password):
            h.update(len(part).to_bytes(4, "big"))
            h.update(part)
        return h.digest()

    def _attempt(self, authorization: str | None) -> _Attempt | None:
        user, password = _parse_basic(authorization)
        if user is None or password is None:
            return None
        hashed = self._users.get(user.decode("utf-8", "replace"))
        known = hashed is not None
        target = hashed if hashed is not None else self._decoy
        key = self._key(user, target, password)
        with self._cache_lock:
            expires = self._cache.get(key)
        cached = known and expires is not None and expires > time.monotonic()
        return _Attempt(user, password, target, known, key, cached,
                        vouched=known and expires is not None)

    def _verify(self, attempt: _Attempt) -> bool:
        import bcrypt

        if len(attempt.password) > _BCRYPT_MAX_PASSWORD_BYTES:
            # bcrypt refuses such passwords; spend the same time anyway.
            bcrypt.checkpw(b"x", attempt.target)
            ok = False
        else:
            ok = bcrypt.checkpw(attempt.password, attempt.target)
        ok = ok and attempt.known
        if ok:
            now = time.monotonic()
            with self._cache_lock:
                if len(self._cache) >= self._cache_size:
                    self._cache = {k: v for k, v in self._cache.items() if v > now}
                    if len(self._cache) >= self._cache_size:
                        self._cache.clear()
                self._cache[attempt.key] = now + self._cache_seconds
        return ok

    def _submit(self, authorization: str | None, peer: str | None
                ) -> bool | futures.Future[bool]:
        """The answer at once (malformed, or cached), or the check on its way. A check
        from a `peer` is charged to its address's budget first (AuthLimited when spent)
        and refunded when it passes; without one (in-process callers) it is not."""
        attempt = self._attempt(authorization)
        if attempt is None:
            return False
        if attempt.cached:
            return True
        if peer is None or attempt.vouched:
            return self.checks.submit(lambda: self._verify(attempt), attempt.vouched,
                                      peer)
        self.budget.charge(peer)
        try:
            future = self.checks.submit(lambda: self._verify(attempt), False, peer)
        except AuthBusy:
            self.budget.refund(peer)  # not checked: not a failure either
            raise

        def refund(done: futures.Future[bool]) -> None:
            if not done.cancelled() and done.exception() is None and done.result():
                self.budget.refund(peer)

        future.add_done_callback(refund)
        return future

    def check(self, authorization: str | None, peer: str | None = None) -> bool:
        """Blocks until checked; AuthBusy when too many checks are waiting, AuthLimited
        when `peer`'s address has spent its budget of failures."""
        answer = self._submit(authorization, peer)
        return answer if isinstance(answer, bool) else answer.result()

    async def check_async(self, authorization: str | None, peer: str | None = None) -> bool:
        """`check` for the event loop: waits without holding a thread."""
        answer = self._submit(authorization, peer)
        return answer if isinstance(answer, bool) else await asyncio.wrap_future(answer)


def _cost(hashed: bytes) -> int:
    # $2b$12$...: the cost is the log2 of the rounds, the second field.
    return int(hashed.split(b"$")[2])


def _parse_basic(authorization: str | None) -> tuple[bytes | None, bytes | None]:
    if not authorization:
        return None, None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None, None
    try:
        decoded = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None, None
    user, sep, password = decoded.partition(b":")
    if not sep:
        return None, None
    return user, password



class LiveWebConfig:
    """The web config in effect, re-read when its file changes, as exporter-toolkit reads
    it again for each new TLS connection and each request: users, their hashes and the
    decoy, headers, and TLS settings and certificates follow the file without a restart.

    The file is looked at (one stat) once a second at most, when a connection or request
    asks (`refresh()`); a change is loaded on a thread of its own, so a decoy hash made at
    a high cost never holds the event loop, and swapped in whole once it loaded. A file
    that no longer loads keeps the config in effect and is reported once per version of
    the file (`on_error`). Whether TLS is on is decided at start, as exporter-toolkit
    does: a change that would turn it on or off is reported and not applied."""

    def __init__(self, config: WebConfig, on_error: Callable[[str], None],
                 on_reload: Callable[[str], None] = lambda _msg: None,
                 check_every: float = 1.0) -> None:
        self._on_error = on_error
        self._on_reload = on_reload
        self._every = check_every
        self._lock = threading.Lock()
        self._checked = time.monotonic()
        self._loading = False
        self._stamp = self._file_stamp(config.source)
        self._bad_stamp: tuple[float, ...] | None = None
        self.config = config
        self.auth: BasicAuth | None = (
            BasicAuth(config.basic_auth_users) if config.auth_required else None)
        self._tls = (CertificateReloader(config.tls, on_error)
                     if config.tls is not None else None)

    @staticmethod
    def _file_stamp(path: str) -> tuple[float, ...]:
        if not path:
            return ()
        try:
            st = os.stat(path)
        except OSError:
            return (-1.0,)
        return (st.st_mtime, float(st.st_size), float(st.st_ino))

    @property
    def tls_enabled(self) -> bool:
        return self._tls is not None

    def context(self) -> ssl.SSLContext:
        """The SSLContext for a new connection (CertificateReloader's), after a look at
        the config file."""
        self.refresh()
        tls = self._tls
        assert tls is not None, "context() asked of a server without TLS"
        return tls.context()

    def headers(self) -> Mapping[str, str]:
        return self.config.headers

    def client_allowed_sans(self) -> tuple[str, ...]:
        return self.config.tls.client_allowed_sans if self.config.tls else ()

    def refresh(self) -> None:
        """Start loading the file again if it changed; never waits for the load."""
        if not self.config.source:
            return
        now = time.monotonic()
        if now - self._checked < self._every:
            return
        with self._lock:
            if self._loading or now - self._checked < self._every:
                return
            self._checked = now
            stamp = self._file_stamp(self.config.source)
            if stamp in (self._stamp, self._bad_stamp):
                return
            self._loading = True
        threading.Thread(target=self._reload, args=(stamp,), name="web-config-reload",
                         daemon=True).start()

    def _reload(self, stamp: tuple[float, ...]) -> None:
        try:
            config = load_web_config(self.config.source)
            if (config.tls is None) != (self._tls is None):
                raise ConfigError(f"--web.config.file {config.source}: TLS cannot be turned "
                                  "on or off while serving: restart to apply")
            old = self.auth
            auth = (BasicAuth(config.basic_auth_users, checks=old.checks, budget=old.budget)
                    if old is not None and config.auth_required
                    else BasicAuth(config.basic_auth_users) if config.auth_required
                    else None)
            tls = (CertificateReloader(config.tls, self._on_error)
                   if config.tls is not None else None)
        except ConfigError as exc:
            with self._lock:
                self._bad_stamp, self._loading = stamp, False
            self._on_error(f"keeping the web config in effect: {exc}")
            return
        with self._lock:
            # Each attribute is one reference: a request sees the old or the new one.
            self.config, self.auth, self._tls = config, auth, tls
            self._stamp, self._bad_stamp, self._loading = stamp, None, False
        self._on_reload(f"web config {config.source} re-read (tls "
                        f"{'on' if tls else 'off'}, basic auth {'on' if auth else 'off'})")
