"""The ``[mysql.tls]`` settings: file paths resolved against the config and checked, per-host overrides,
the dump, the SSL context built from them, and the sandbox's certificates (no server needed).

The real servers: ``tests/integration/test_tls.py``."""

from __future__ import annotations

import os
import ssl
import stat

import pytest

from migrator.errors import ConfigError
from migrator.fleet import config as config_mod
from migrator.fleet.model import Host
from migrator.fleet.mysql import tls_of
from migrator.sandbox.tls import SandboxTLS, make_ca


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return SandboxTLS(tmp_path_factory.mktemp("tls")).ensure()


def _config(tmp_path, tls: str):
    p = tmp_path / "migrator.toml"
    p.write_text('[zookeeper]\nhosts = "127.0.0.1:1"\n\n' + tls)
    return config_mod.load(p)


def test_relative_paths_resolve_against_the_config_file(tmp_path, certs):
    (tmp_path / "tls").symlink_to(certs.dir)
    cfg = _config(tmp_path, '[mysql.tls]\nca = "tls/ca.pem"\ncert = "tls/client-cert.pem"\n'
                            'key = "tls/client-key.pem"\n')
    assert cfg.mysql.tls.ca == tmp_path / "tls" / "ca.pem"
    assert cfg.mysql.tls.key == tmp_path / "tls" / "client-key.pem"


@pytest.mark.parametrize("section,setting", [
    ('[mysql.tls]\nca = "nowhere/ca.pem"\n', "mysql.tls.ca"),
    ('[mysql.tls]\nca = "{ca}"\ncert = "missing-cert.pem"\n', "mysql.tls.cert"),
    ('[mysql.tls]\nca = "{ca}"\n\n[mysql.tls.hosts.MySQL002A]\nkey = "no-key.pem"\n', "mysql.tls.hosts.MySQL002A.key"),
])
def test_a_missing_file_is_one_line_naming_the_setting(tmp_path, certs, section, setting):
    with pytest.raises(ConfigError) as exc:
        _config(tmp_path, section.replace("{ca}", str(certs.ca)))
    msg = exc.value.message
    assert "\n" not in msg and f": {setting}: file " in msg and "does not exist" in msg, msg


def test_a_key_without_a_certificate_is_refused(tmp_path, certs):
    with pytest.raises(ConfigError, match="key is set without a cert"):
        _config(tmp_path, f'[mysql.tls]\nca = "{certs.ca}"\nkey = "{certs.client_key}"\n')


def test_unknown_keys_are_refused(tmp_path, certs):
    with pytest.raises(ConfigError, match="mysql.tls.verify_host"):
        _config(tmp_path, f'[mysql.tls]\nca = "{certs.ca}"\nverify_host = false\n')


def test_per_host_overrides_merge_over_the_fleet_default(tmp_path, certs):
    other = make_ca(tmp_path / "other", "another CA")
    cfg = _config(tmp_path, f'[mysql.tls]\nca = "{certs.ca}"\ncert = "{certs.client_cert}"\n'
                            f'key = "{certs.client_key}"\n\n'
                            f'[mysql.tls.hosts.MySQL002A]\nca = "{other}"\nverify_hostname = false\n\n'
                            '[mysql.tls.hosts.MySQL003A]\nenabled = false\n')
    creds = config_mod.Credentials(mysql_user="u", mysql_password="p", mysql_tls=cfg.mysql.tls)

    def host(name):
        return Host(name=name, port=1, partner="MySQL009A")

    a = tls_of(host("MySQL001A"), creds)
    assert (a.ca, a.cert, a.key, a.verify_hostname) == (certs.ca, certs.client_cert, certs.client_key, True)
    b = tls_of(host("MySQL002A"), creds)
    assert (b.ca, b.cert, b.verify_hostname) == (other, certs.client_cert, False)
    assert tls_of(host("MySQL003A"), creds) is None
    # the dump carries every setting: the file a test fixture writes from it means the same
    p = tmp_path / "again.toml"
    p.write_text(config_mod.dump(cfg))
    assert config_mod.load(p).mysql.tls == cfg.mysql.tls


def test_no_section_means_no_tls_and_credentials_load_it(tmp_path, monkeypatch, certs):
    monkeypatch.setenv("MIGRATOR_MYSQL_USER", "u")
    monkeypatch.setenv("MIGRATOR_MYSQL_PASSWORD", "p")
    plain = _config(tmp_path, "")
    assert plain.mysql.tls is None and config_mod.load_credentials(plain).mysql_tls is None
    only_one = _config(tmp_path, f'[mysql.tls]\nenabled = false\n\n[mysql.tls.hosts.MySQL001B]\nenabled = true\n'
                                 f'ca = "{certs.ca}"\n')
    creds = config_mod.load_credentials(only_one)
    assert tls_of(Host(name="MySQL001A", port=1, partner="MySQL001B"), creds) is None
    assert tls_of(Host(name="MySQL001B", port=1, partner="MySQL001A"), creds).ca == certs.ca


def test_the_context_verifies_and_is_shared_until_a_file_changes(tmp_path, certs):
    cfg = _config(tmp_path, f'[mysql.tls]\nca = "{certs.ca}"\ncert = "{certs.client_cert}"\n'
                            f'key = "{certs.client_key}"\n')
    tls = cfg.mysql.tls.for_host("MySQL001A")
    ctx = tls.context()
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert tls.context() is ctx
    st = certs.ca.stat()
    os.utime(certs.ca, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert tls.context() is not ctx  # a rotated CA is read again


def test_sandbox_certificates(certs):
    for key in (certs.ca_key, certs.server_key, certs.client_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certs.ca))
    server.load_cert_chain(str(certs.server_cert), str(certs.server_key))
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(certs.server_cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    before = certs.ca.read_bytes()
    assert certs.ensure().ca.read_bytes() == before  # made once
