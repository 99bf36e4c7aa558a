-- values that the LOAD DATA text format must carry exactly: its separators and escapes
-- inside text and binary values, NULL next to '' and the two characters \N, FLOAT,
-- DATETIME(6), BIT of every width, an explicit id 0, a latin1 column next to utf8mb4
CREATE TABLE escapes (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  t TEXT NULL,
  l VARCHAR(40) CHARACTER SET latin1 NULL,
  b VARBINARY(40) NULL,
  f FLOAT NULL,
  d DOUBLE NULL,
  dt6 DATETIME(6) NULL,
  b1 BIT(1) NULL,
  b64 BIT(64) NULL,
  e ENUM('', 'a\tb', 'x') NULL,
  j JSON NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
-- every row ends with an empty field: so does every chunk's last line
CREATE TABLE trailing_empty (
  id INT NOT NULL PRIMARY KEY,
  v VARCHAR(10) NOT NULL DEFAULT ''
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
