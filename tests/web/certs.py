"""Test certificates made on the spot with `cryptography`: a CA, a server certificate for
localhost/127.0.0.1, client certificates from that CA and from an unrelated one."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(folder: Path, stem: str, cert: x509.Certificate,
           key: ec.EllipticCurvePrivateKey) -> Pair:
    c, k = folder / f"{stem}.crt", folder / f"{stem}.key"
    c.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    k.chmod(0o600)
    return Pair(c, k)


class CA:
    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name)).issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.pair = _write(folder, name, self.cert, self.key)

    def issue(self, stem: str, cn: str, *, server: bool, dns: tuple[str, ...] = (),
              ips: tuple[str, ...] = ()) -> Pair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn)).issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return _write(self.folder, stem, builder.sign(self.key, hashes.SHA256()), key)


@dataclass(frozen=True)
class Certs:
    ca: Pair
    server: Pair
    client: Pair
    # a client certificate signed by a CA the exporter does not trust
    rogue_client: Pair
    ca_obj: CA


def make_certs(folder: Path) -> Certs:
    ca = CA(folder, "test-ca")
    rogue = CA(folder, "rogue-ca")
    return Certs(
        ca=ca.pair,
        server=ca.issue("server", "localhost", server=True, dns=("localhost",),
                        ips=("127.0.0.1",)),
        client=ca.issue("client", "prometheus", server=False, dns=("prometheus.monitoring",)),
        rogue_client=rogue.issue("rogue", "prometheus", server=False,
                                 dns=("prometheus.monitoring",)),
        ca_obj=ca,
    )
