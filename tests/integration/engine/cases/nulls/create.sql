CREATE TABLE null_things (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  n_int INT NULL, n_text TEXT NULL, n_date DATE NULL, n_dt DATETIME(3) NULL, n_dec DECIMAL(12, 4) NULL,
  n_float DOUBLE NULL, n_blob BLOB NULL, n_json JSON NULL, n_enum ENUM('a', 'b') NULL, n_set SET('x', 'y') NULL,
  n_ts TIMESTAMP NULL DEFAULT NULL, n_time TIME(2) NULL, n_year YEAR NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
