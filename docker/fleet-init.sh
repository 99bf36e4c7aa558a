#!/bin/sh
# One-shot setup of the compose fleet (runs with the host's network, so it reaches
# the servers on their published 127.0.0.1 ports, as migrator on the host does):
# master-master replication in each pair, the host registry and shard map in
# ZooKeeper, and the seeded shard databases.
set -eu
apt-get update -qq && apt-get install -y -qq mariadb-client >/dev/null
pip install -q /src
port=33101
for pair in 001 002 003; do
  a="mysql${pair}a"; b="mysql${pair}b"
  # each side replicates from its peer; MASTER_HOST is resolved on the compose network
  mariadb --no-defaults -h 127.0.0.1 -P "$port" -uroot -e "CHANGE MASTER TO MASTER_HOST='$b', MASTER_PORT=3306, \
    MASTER_USER='repl', MASTER_PASSWORD='repl-compose', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1; START SLAVE;"
  mariadb --no-defaults -h 127.0.0.1 -P "$((port + 1))" -uroot -e "CHANGE MASTER TO MASTER_HOST='$a', MASTER_PORT=3306, \
    MASTER_USER='repl', MASTER_PASSWORD='repl-compose', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1; START SLAVE;"
  port=$((port + 2))
done
export MIGRATOR_CONFIG=/src/docker/migrator.toml
migrator topology init --from /src/docker/shardmap.json --hosts /src/docker/hosts.json
migrator topology create-shards --rows 100
