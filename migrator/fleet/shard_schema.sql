-- The seed schema of one virtual shard (database dbNNNNN).
-- Object tables: AUTO_INCREMENT local_id and a JSON blob. Mapping tables:
-- (from id, to id, sequence), keyed on the "from" shard's ids. Every table has a
-- primary key, which the migration engine requires.
CREATE TABLE IF NOT EXISTS pins (
  local_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  data JSON NOT NULL,
  ts TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS boards (
  local_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  data JSON NOT NULL,
  ts TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS users (
  local_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  data JSON NOT NULL,
  ts TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS board_has_pins (
  board_id BIGINT UNSIGNED NOT NULL,
  pin_id BIGINT UNSIGNED NOT NULL,
  sequence BIGINT NOT NULL,
  PRIMARY KEY (board_id, pin_id),
  KEY board_sequence (board_id, sequence)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS user_has_boards (
  user_id BIGINT UNSIGNED NOT NULL,
  board_id BIGINT UNSIGNED NOT NULL,
  sequence BIGINT NOT NULL,
  PRIMARY KEY (user_id, board_id),
  KEY user_sequence (user_id, sequence)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
