CREATE TABLE gen_totals (
  id INT NOT NULL PRIMARY KEY,
  a INT NOT NULL,
  b INT NOT NULL,
  total INT AS (a + b) VIRTUAL,
  label VARCHAR(40) AS (CONCAT('total=', a + b)) STORED,
  INDEX (total)
) ENGINE=InnoDB;
