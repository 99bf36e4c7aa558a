-- Runs once per container at first start (docker-entrypoint-initdb.d), not binlogged,
-- so the peer never replays it. Same users and grants as `migrator sandbox up`
-- (migrator/sandbox/__init__.py MIGRATOR_GRANTS; tests/unit/sandbox/test_compose_in_step.py checks it).
SET sql_log_bin = 0;
CREATE USER IF NOT EXISTS 'migrator'@'%' IDENTIFIED BY 'migrator-compose';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, LOCK TABLES, CREATE TEMPORARY TABLES,
  RELOAD, PROCESS, REPLICATION SLAVE, BINLOG MONITOR, SLAVE MONITOR, REPLICATION SLAVE ADMIN,
  CONNECTION ADMIN, TRIGGER, BINLOG ADMIN, SHOW VIEW, CREATE VIEW, CREATE ROUTINE, ALTER ROUTINE, BINLOG REPLAY
  ON *.* TO 'migrator'@'%';
CREATE USER IF NOT EXISTS 'repl'@'%' IDENTIFIED BY 'repl-compose';
GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%';
RESET MASTER;
