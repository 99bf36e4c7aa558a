"""MySQL TLS settings: the ``[mysql.tls]`` section of the config, with per-host overrides.

Paths only: the CA that signed the servers' certificates, the client
certificate and its key. The files stay on disk, where the operator put them;
their content is read by the TLS library when a connection opens and is never
copied into ZooKeeper, Redis, logs or job meta. Relative paths are relative to
the config file. ::

    [mysql.tls]
    ca = "tls/ca.pem"
    cert = "tls/client-cert.pem"     # optional: a client certificate ...
    key = "tls/client-key.pem"       # ... and its key (both or neither)
    verify_hostname = true           # the server certificate must name the host's address

    [mysql.tls.hosts.MySQL003A]      # one host differs: every key optional
    ca = "/etc/mysql/other-ca.pem"
    verify_hostname = false

Without the section, connections use TLS when the server offers it but do not
verify it (PyMySQL's preferred mode); ``migrator preflight`` fails on a host
that requires secure transport while no TLS is configured for it. With it,
every connection to a host it covers must be TLS, verified against ``ca``
(the system's trust store when ``ca`` is not set). ``enabled = false`` at the
top turns it off for every host but those whose override says ``enabled = true``.
"""

from __future__ import annotations

import ssl
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator, model_validator

#: the files a TLS setting names
FILE_KEYS = ("ca", "cert", "key")


def _resolve(v: Any, info: ValidationInfo) -> Path | None:
    """A path setting: relative to the config file's folder (given as validation context), and it must exist."""
    if v is None or v == "":
        return None
    p = Path(v).expanduser()
    base = (info.context or {}).get("base") if info.context else None
    if not p.is_absolute() and base is not None:
        p = Path(base) / p
    if not p.is_file():
        raise ValueError(f"file {p} does not exist (or is not a file): fix the path or create the file")
    return p


class MySQLTLS(BaseModel):
    """The TLS settings of one host's connections (the fleet's default merged with the host's override)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    verify_hostname: bool = True

    def context(self) -> ssl.SSLContext:
        """An SSL context for these settings: shared by every connection of the process while the files are
        unchanged (building one reads the CA store: tens of milliseconds), rebuilt after they change."""
        stamp = tuple(p.stat().st_mtime_ns if p else 0 for p in (self.ca, self.cert, self.key))
        ident = (self.ca, self.cert, self.key, self.verify_hostname, stamp)
        with _CONTEXTS_LOCK:
            ctx = _CONTEXTS.get(ident)
            if ctx is None:
                ctx = ssl.create_default_context(cafile=str(self.ca) if self.ca else None)
                ctx.check_hostname = self.verify_hostname
                ctx.verify_mode = ssl.CERT_REQUIRED
                if self.cert is not None:
                    ctx.load_cert_chain(str(self.cert), keyfile=str(self.key) if self.key else None)
                _CONTEXTS[ident] = ctx
            return ctx

    def describe(self) -> str:
        """Where the settings point (for messages: paths, never contents)."""
        return f"mysql.tls ca={self.ca or 'the system trust store'}, verify_hostname={self.verify_hostname}"


_CONTEXTS: dict[tuple[Any, ...], ssl.SSLContext] = {}
_CONTEXTS_LOCK = threading.Lock()


class _Files(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    enabled: bool | None = None
    verify_hostname: bool | None = None

    @field_validator(*FILE_KEYS, mode="before")
    @classmethod
    def _file(cls, v: Any, info: ValidationInfo) -> Path | None:
        return _resolve(v, info)


class MySQLTLSOverride(_Files):
    """``[mysql.tls.hosts.NAME]``: what differs for one host; unset keys come from ``[mysql.tls]``."""


class MySQLTLSSettings(_Files):
    """``[mysql.tls]``: the fleet's default, and the overrides per host name."""

    hosts: dict[str, MySQLTLSOverride] = {}

    @model_validator(mode="after")
    def _key_needs_cert(self) -> MySQLTLSSettings:
        for name, o in {"": self, **{f"hosts.{h}.": v for h, v in self.hosts.items()}}.items():
            if o.key is not None and (o.cert or self.cert) is None:
                raise ValueError(f"{name}key is set without a cert: set {name}cert to the client certificate")
        return self

    def for_host(self, name: str) -> MySQLTLS | None:
        """The settings for host ``name``, or None when TLS is not configured for it."""
        o = self.hosts.get(name)
        merged = {k: getattr(self, k) for k in (*FILE_KEYS, "enabled", "verify_hostname")}
        if o is not None:
            merged.update({k: getattr(o, k) for k in o.model_fields_set})
        if merged.pop("enabled") is False:
            return None
        if merged["verify_hostname"] is None:
            merged["verify_hostname"] = True
        return MySQLTLS(**merged)

    def dump(self) -> list[str]:
        """The TOML lines of this section (absolute paths)."""
        lines = ["[mysql.tls]", *self._lines(self)]
        for host, o in sorted(self.hosts.items()):
            lines += ["", f"[mysql.tls.hosts.{host}]", *self._lines(o)]
        return lines

    @staticmethod
    def _lines(o: _Files) -> list[str]:
        out = [f'{k} = "{Path(getattr(o, k)).resolve()}"' for k in FILE_KEYS if getattr(o, k) is not None]
        out += [f"{k} = {str(getattr(o, k)).lower()}" for k in ("enabled", "verify_hostname")
                if getattr(o, k) is not None]
        return out


class MySQLSettings(BaseModel):
    """``[mysql]``: how the toolkit reaches the fleet's servers (the identity lives in the secrets)."""

    model_config = ConfigDict(extra="forbid")

    tls: MySQLTLSSettings | None = None
