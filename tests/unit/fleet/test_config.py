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


# -- Redis settings ------------------------------------------------------------------------------

REDIS_ENV = ("MIGRATOR_REDIS_PASSWORD", "MIGRATOR_REDIS_USERNAME")


@pytest.mark.parametrize("url", ["redis://:pw@127.0.0.1:6379/0", "redis://mig:pw@127.0.0.1:6379/0",
                                 "rediss://mig@10.0.0.1:6380/2"])
def test_redis_url_with_credentials_is_refused_with_where_they_go(tmp_path, url):
    with pytest.raises(ConfigError, match="MIGRATOR_REDIS_PASSWORD") as err:
        config_mod.load(write(tmp_path, f'[redis]\nurl = "{url}"\n'))
    assert "pw" not in str(err.value)  # the secret is not repeated in the error
    assert "secrets file" in str(err.value)


@pytest.mark.parametrize("text,msg", [
    ('[redis]\nurl = "http://127.0.0.1:6379"\n', "not a Redis URL"),
    ('[redis]\nurl = "redis://127.0.0.1:6379/0"\nca_file = "ca.pem"\n', "rediss://"),
    ('[redis]\nsentinels = ["127.0.0.1:26379"]\n', "service_name"),
    ('[redis]\nservice_name = "m"\n', "sentinels"),
    ('[redis]\nsentinels = ["nohostport"]\nservice_name = "m"\n', "host:port"),
    ('[redis]\npassword = "pw"\n', "password"),
])
def test_bad_redis_settings(tmp_path, text, msg):
    with pytest.raises(ConfigError, match=msg):
        config_mod.load(write(tmp_path, text))


def test_redis_tls_and_sentinel_settings_round_trip(tmp_path):
    p = write(tmp_path, '[redis]\nurl = "rediss://r.example:6380/3"\nca_file = "ca.pem"\n'
                        'sentinels = ["10.0.0.1:26379", "10.0.0.2:26379"]\nservice_name = "mig"\n')
    cfg = config_mod.load(p)
    assert cfg.redis.tls and cfg.redis.db == 3 and cfg.redis_ca_path() == tmp_path / "ca.pem"
    again = config_mod.load(write(tmp_path, config_mod.dump(cfg), "again.toml"))
    assert again.redis == cfg.redis


def test_redis_credentials_from_env_then_secrets_file(tmp_path, monkeypatch):
    for k in REDIS_ENV:
        monkeypatch.delenv(k, raising=False)
    cfg = config_mod.load(write(tmp_path, '[redis]\nurl = "redis://127.0.0.1:1/0"\n'))
    none = config_mod.load_redis_credentials(cfg)
    assert none.username is None and none.password is None  # a Redis without requirepass
    write(tmp_path, '[redis]\nuser = "mig"\npassword = "filepw"\n', "secrets.toml")
    cfg = config_mod.load(write(tmp_path, '[credentials]\nfile = "secrets.toml"\n'))
    creds = config_mod.load_redis_credentials(cfg)
    assert (creds.username, creds.password) == ("mig", "filepw") and "filepw" not in repr(creds)
    monkeypatch.setenv("MIGRATOR_REDIS_PASSWORD", "envpw")
    monkeypatch.setenv("MIGRATOR_REDIS_USERNAME", "other")
    creds = config_mod.load_redis_credentials(cfg)
    assert (creds.username, creds.password) == ("other", "envpw")


def test_redis_acl_user_without_password_says_where_to_put_it(tmp_path, monkeypatch):
    for k in REDIS_ENV:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("MIGRATOR_REDIS_USERNAME", "mig")
    cfg = config_mod.load(write(tmp_path, '[redis]\nurl = "redis://127.0.0.1:1/0"\n'))
    with pytest.raises(CredentialsError, match="MIGRATOR_REDIS_PASSWORD"):
        config_mod.load_redis_credentials(cfg)


def test_a_zookeeper_host_list_that_is_not_one_is_a_config_error():
    from migrator.errors import ConfigError, ExitCode

    for good in ("127.0.0.1:2181", "zk1:2181,zk2:2181,zk3", "10.0.0.5:2181,10.0.0.6:2181/prod", "[::1]:2181"):
        assert config_mod.parse({"zookeeper": {"hosts": good}}).zookeeper.hosts == good
    for bad in ("garbage!!:x", "this is not:a host list", "zk1:99999", "zk1:2181,", "zk1:2181/../x", ""):
        with pytest.raises(ConfigError, match="zookeeper.hosts") as info:
            config_mod.parse({"zookeeper": {"hosts": bad}})
        assert info.value.exit_code == ExitCode.CONFIG


def test_not_converging_exits_6_through_the_cli_handler():
    from migrator.cli.failures import describe
    from migrator.engine.catch_up.passes import NotConverging

    assert describe(NotConverging("catch-up of m-x does not converge"))[1] == 6


def test_a_secrets_file_readable_by_others_is_warned_about_once(tmp_path, capsys):
    secrets = tmp_path / "secrets.toml"
    secrets.write_text('[mysql]\nuser = "u"\npassword = "p"\n')
    cfg = config_mod.load(write(tmp_path, '[credentials]\nfile = "secrets.toml"\n'))
    secrets.chmod(0o600)
    config_mod.load_credentials(cfg)
    assert capsys.readouterr().err == ""
    secrets.chmod(0o640)
    config_mod.load_credentials(cfg)
    config_mod.load_redis_credentials(cfg)  # read again: still one line
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("warning: ") and "0640" in err[0] and "chmod 600" in err[0], err
