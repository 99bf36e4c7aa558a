import pytest

from migrator.errors import ConfigError, CredentialsError
from migrator.fleet import config as config_mod


def write(tmp_path, text, name="migrator.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_resolution_order(tmp_path, monkeypatch):
    monkeypatch.delenv("MIGRATOR_CONFIG", raising=False)
    assert config_mod.resolve_path(None) == config_mod.DEFAULT_CONFIG
    monkeypatch.setenv("MIGRATOR_CONFIG", str(tmp_path / "env.toml"))
    assert config_mod.resolve_path(None) == tmp_path / "env.toml"
    assert config_mod.resolve_path(tmp_path / "x.toml") == tmp_path / "x.toml"


def test_load_and_credentials_file(tmp_path, monkeypatch):
    for k in ("MIGRATOR_MYSQL_USER", "MIGRATOR_MYSQL_PASSWORD", "MIGRATOR_ZK_DIGEST", "MIGRATOR_QUEUE_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    write(tmp_path, '[mysql]\nuser = "mig"\npassword = "s3cret"\n[zookeeper]\ndigest = "mig:zz"\n', "secrets.toml")
    p = write(tmp_path, '[zookeeper]\nhosts = "127.0.0.1:1"\nroot = "/x"\n[credentials]\nfile = "secrets.toml"\n')
    cfg = config_mod.load(p)
    assert cfg.zookeeper.root == "/x"
    creds = config_mod.load_credentials(cfg)
    assert creds.mysql_user == "mig" and creds.zk_identity == "mig"
    assert "s3cret" not in repr(creds) and "zz" not in repr(creds)
    monkeypatch.setenv("MIGRATOR_MYSQL_PASSWORD", "fromenv")
    assert config_mod.load_credentials(cfg).mysql_password == "fromenv"


def test_dump_round_trip(tmp_path):
    cfg = config_mod.parse({"zookeeper": {"hosts": "h:1", "root": "/r"}, "redis": {"url": "redis://x/1"},
                            "credentials": {"file": "s.toml"}})
    p = write(tmp_path, config_mod.dump(cfg))
    again = config_mod.load(p)
    assert again.zookeeper.hosts == "h:1" and again.redis.url == "redis://x/1" and again.credentials.file == "s.toml"


@pytest.mark.parametrize("text,msg", [
    ("[zookeeper\n", "not valid TOML"),
    ('[zookeeper]\nroot = "relative"\n', "absolute znode path"),
    ('[nonsense]\nx = 1\n', "nonsense"),
])
def test_bad_config(tmp_path, text, msg):
    with pytest.raises(ConfigError, match=msg):
        config_mod.load(write(tmp_path, text))


def test_missing_config_says_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="sandbox up"):
        config_mod.load(tmp_path / "absent.toml")


def test_missing_credentials(tmp_path, monkeypatch):
    monkeypatch.delenv("MIGRATOR_MYSQL_USER", raising=False)
    monkeypatch.delenv("MIGRATOR_MYSQL_PASSWORD", raising=False)
    cfg = config_mod.load(write(tmp_path, "[zookeeper]\n"))
    with pytest.raises(CredentialsError, match="MIGRATOR_MYSQL_USER"):
        config_mod.load_credentials(cfg)
    cfg2 = config_mod.load(write(tmp_path, '[credentials]\nfile = "nope.toml"\n', "b.toml"))
    with pytest.raises(CredentialsError, match="does not exist"):
        config_mod.load_credentials(cfg2)
