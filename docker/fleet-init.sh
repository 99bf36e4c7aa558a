#!/bin/sh
# One-shot setup of the compose fleet (runs with the host's network, so it reaches
# the servers on their published 127.0.0.1 ports, as migrator on the host does):
# master-master replication in each pair, the host registry and shard map in
# ZooKeeper, and the seeded shard databases.
set -eu
apt-get update -qq && apt-get install -y -qq mariadb-client >/dev/null
pip install -q /src
# the servers take TLS only: this client verifies them with the compose fleet's CA (docker/tls, made by tls-init)
sql() {
  mariadb --no-defaults -h 127.0.0.1 -P "$1" -uroot --ssl --ssl-ca=/src/docker/tls/ca.pem --ssl-verify-server-cert \
    -e "$2"
}
# a replication thread verifies its peer's certificate by service name, with the paths inside the containers
TLS="MASTER_SSL=1, MASTER_SSL_CA='/etc/mysql/tls/ca.pem', MASTER_SSL_CERT='/etc/mysql/tls/client-cert.pem', \
MASTER_SSL_KEY='/etc/mysql/tls/repl-key.pem', MASTER_SSL_VERIFY_SERVER_CERT=1"
port=33101
for pair in 001 002 003; do
  a="mysql${pair}a"; b="mysql${pair}b"
  # each side replicates from its peer; MASTER_HOST is resolved on the compose network
  sql "$port" "CHANGE MASTER TO MASTER_HOST='$b', MASTER_PORT=3306, MASTER_USER='repl', \
    MASTER_PASSWORD='repl-compose', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1, $TLS; START SLAVE;"
  sql "$((port + 1))" "CHANGE MASTER TO MASTER_HOST='$a', MASTER_PORT=3306, MASTER_USER='repl', \
    MASTER_PASSWORD='repl-compose', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1, $TLS; START SLAVE;"
  port=$((port + 2))
done
export MIGRATOR_CONFIG=/src/docker/migrator.toml
migrator topology init --from /src/docker/shardmap.json --hosts /src/docker/hosts.json
migrator topology create-shards --rows 100
