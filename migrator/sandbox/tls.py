"""The sandbox's certificates: a CA of its own, one server certificate, one client certificate.

Made once per sandbox in ``<dir>/tls`` with the ``cryptography`` package: EC P-256 keys,
valid for ten years. The server certificate names ``127.0.0.1`` and ``localhost`` (every
sandbox host listens there, so hostname verification holds), and any other host name
given (docker-compose.yml's servers reach each other by service name); the client
certificate is the migration identity's and the replication threads'. Private keys are
written 0600.

``python -m migrator.sandbox.tls DIR [HOSTNAME...]`` makes them in ``DIR``: the compose
fleet's ``tls-init`` service runs it, so the compose fleet has the sandbox's TLS.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 3650


#: the files of a sandbox's TLS folder
FILES = {"ca": "ca.pem", "ca_key": "ca-key.pem", "server_cert": "server-cert.pem", "server_key": "server-key.pem",
         "client_cert": "client-cert.pem", "client_key": "client-key.pem"}


@dataclass(frozen=True)
class SandboxTLS:
    """Where one sandbox's certificate files are."""

    dir: Path
    ca: Path = field(init=False)
    ca_key: Path = field(init=False)
    server_cert: Path = field(init=False)
    server_key: Path = field(init=False)
    client_cert: Path = field(init=False)
    client_key: Path = field(init=False)

    def __post_init__(self) -> None:
        for attr, name in FILES.items():
            object.__setattr__(self, attr, self.dir / name)

    def exists(self) -> bool:
        return all((self.dir / name).exists() for name in FILES.values())

    def ensure(self, hostnames: tuple[str, ...] = ()) -> SandboxTLS:
        """Make the CA and the certificates unless they are there already; the server certificate names
        ``hostnames`` besides 127.0.0.1 and localhost."""
        if self.exists():
            return self
        self.dir.mkdir(parents=True, exist_ok=True)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = _name("migrator sandbox CA")
        ca = _cert(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)
        server_key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        names += [x509.DNSName(h) for h in hostnames if h not in ("localhost", "127.0.0.1")]
        server = _cert(_name("migrator sandbox MariaDB"), ca_name, server_key.public_key(), ca_key,
                       san=names, usage=ExtendedKeyUsageOID.SERVER_AUTH)
        client_key = ec.generate_private_key(ec.SECP256R1())
        client = _cert(_name("migrator"), ca_name, client_key.public_key(), ca_key,
                       usage=ExtendedKeyUsageOID.CLIENT_AUTH)
        _write_key(self.ca_key, ca_key)
        _write_key(self.server_key, server_key)
        _write_key(self.client_key, client_key)
        for path, cert in ((self.server_cert, server), (self.client_cert, client), (self.ca, ca)):
            path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return self

    def server_options(self) -> list[str]:
        """my.cnf lines: TLS with these certificates, and no plaintext client over TCP (a unix-socket
        client, the sandbox's root, counts as secure)."""
        return [f"ssl-ca={self.ca}", f"ssl-cert={self.server_cert}", f"ssl-key={self.server_key}",
                "require-secure-transport=ON"]

    def change_master(self) -> tuple[str, tuple[str, ...]]:
        """The CHANGE MASTER clauses (and their parameters) of a replication thread over verified TLS."""
        return (", MASTER_SSL=1, MASTER_SSL_CA=%s, MASTER_SSL_CERT=%s, MASTER_SSL_KEY=%s, "
                "MASTER_SSL_VERIFY_SERVER_CERT=1", (str(self.ca), str(self.client_cert), str(self.client_key)))

    def config_section(self) -> dict[str, Any]:
        """The ``[mysql.tls]`` settings of the config the sandbox writes."""
        return {"ca": str(self.ca), "cert": str(self.client_cert), "key": str(self.client_key),
                "verify_hostname": True}


def make_ca(directory: Path, common_name: str) -> Path:
    """Another CA's certificate (its key is not kept): what verifying against the wrong CA looks like."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "ca.pem"
    path.write_bytes(_cert(name, name, key.public_key(), key, ca=True).public_bytes(serialization.Encoding.PEM))
    return path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey,
          signer: ec.EllipticCurvePrivateKey, *, ca: bool = False, san: list[x509.GeneralName] | None = None,
          usage: x509.ObjectIdentifier | None = None) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
         .serial_number(x509.random_serial_number())
         .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
         .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False))
    if ca:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                          content_commitment=False, key_encipherment=False, data_encipherment=False,
                                          key_agreement=False, encipher_only=False, decipher_only=False),
                            critical=True)
    if san:
        b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
    if usage is not None:
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return b.sign(signer, hashes.SHA256())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def server_names(cert: Path) -> list[str]:
    """The host names and addresses a server certificate names."""
    c = x509.load_pem_x509_certificate(cert.read_bytes())
    san = c.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(n.value) for n in san]


if __name__ == "__main__":
    import sys

    made = SandboxTLS(Path(sys.argv[1])).ensure(tuple(sys.argv[2:]))
    print(f"certificates in {made.dir}: server names {', '.join(server_names(made.server_cert))}")
