-- values whose text rendering loses something, carried bit for bit by every path (the copy, catch-up,
-- verify's repair, the cutover's): a FLOAT's text has 6 significant digits, an ENUM label cannot tell
-- the member '' from the invalid value (index 0), cp1251 has no Unicode for 0x98; the other columns
-- are the types of a table that once lost FLOATs in a split (UUID, INET6, POINT, JSON, BIT, YEAR, ...)
CREATE TABLE exact_types (
  id INT NOT NULL PRIMARY KEY,
  u UUID NULL,
  ip INET6 NULL,
  pt POINT NULL,
  j JSON NULL,
  bits BIT(13) NULL,
  y YEAR NULL,
  t3 TIME(3) NULL,
  f FLOAT NULL,
  f74 FLOAT(7,4) NULL,
  d DOUBLE NULL,
  d103 DOUBLE(10,3) NULL,
  ub BIGINT UNSIGNED NULL,
  vb VARBINARY(32) NULL,
  st SET('a', 'b', 'c', 'd') NULL,
  en ENUM('', 'x', 'y') NULL,
  dt6 DATETIME(6) NULL,
  ts6 TIMESTAMP(6) NULL DEFAULT NULL,
  lt TEXT CHARACTER SET latin1 NULL,
  cy VARCHAR(20) CHARACTER SET cp1251 NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
-- a FLOAT key: two keys that print the same 6 digits are two rows
CREATE TABLE exact_float_key (
  f FLOAT NOT NULL PRIMARY KEY,
  v INT NOT NULL
) ENGINE=InnoDB;
-- an ENUM key whose labels are not in index order: ordered by index, compared by label
CREATE TABLE exact_enum_key (
  k ENUM('zulu', 'alpha', 'mike', 'bravo') NOT NULL,
  n INT NOT NULL,
  v VARCHAR(10) NOT NULL,
  PRIMARY KEY (k, n)
) ENGINE=InnoDB;
