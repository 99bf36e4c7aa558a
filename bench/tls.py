"""TLS for the benchmarks' own clients (the fleet's ``[mysql.tls]`` settings, as each tool takes them)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from migrator.errors import ConfigError
from migrator.fleet.mysql import tls_of


def cli_args(host: Any, creds: Any) -> list[str]:
    """Options of the ``mariadb`` and ``mariadb-dump`` clients for TLS to ``host`` (none without TLS).
    The 10.11 clients verify the server's certificate only together with its name."""
    tls = tls_of(host, creds)
    if tls is None:
        return []
    out = ["--ssl"] + [f"--ssl-{k}={getattr(tls, k)}" for k in ("ca", "cert", "key") if getattr(tls, k)]
    return out + (["--ssl-verify-server-cert"] if tls.verify_hostname else [])


def change_master(host: Any, creds: Any) -> tuple[str, tuple[str, ...]]:
    """The CHANGE MASTER clauses (and parameters) of a replica of ``host`` over TLS ("" without TLS)."""
    tls = tls_of(host, creds)
    if tls is None:
        return "", ()
    sql, args = ", MASTER_SSL=1", []
    for k in ("ca", "cert", "key"):
        if getattr(tls, k):
            sql += f", MASTER_SSL_{k.upper()}=%s"
            args.append(str(getattr(tls, k)))
    return sql + (", MASTER_SSL_VERIFY_SERVER_CERT=1" if tls.verify_hostname else ""), tuple(args)


def sysbench_dir(host: Any, creds: Any) -> str | None:
    """The working directory sysbench finds the host's TLS files in (links to them), or None without TLS."""
    tls = tls_of(host, creds)
    if tls is None:
        return None
    if tls.cert is None or tls.ca is None:
        raise ConfigError(f"sysbench reaches {host.name} over TLS only with mysql.tls ca, cert and key set")
    files = {"cacert.pem": tls.ca, "client-cert.pem": tls.cert, "client-key.pem": tls.key or tls.cert}
    tag = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:12]
    # beside the CA (a sandbox's TLS files live in its directory, so these go when it is removed)
    d = Path(tls.ca).parent / f"sysbench-tls-{tag}"
    try:
        d.mkdir(mode=0o700, exist_ok=True)
    except OSError:  # not writable there: the temporary directory, left for the next run to reuse
        d = Path(tempfile.gettempdir()) / f"migrator-sysbench-tls-{os.getuid()}-{tag}"
        d.mkdir(mode=0o700, exist_ok=True)
    for name, target in files.items():
        link = d / name
        if not link.is_symlink() or os.readlink(link) != str(target):
            link.unlink(missing_ok=True)
            link.symlink_to(target)
    return str(d)
