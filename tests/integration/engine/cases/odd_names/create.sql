-- legal names however odd: spaces, a reserved word, non-ASCII, a doubled backtick, a dot
CREATE TABLE `odd name ``q`` ü.select` (
  `the key` INT NOT NULL,
  `select` VARCHAR(20) NOT NULL,
  `ü col` INT NULL,
  `back``tick` VARCHAR(10) NULL,
  `a.b` INT NULL,
  PRIMARY KEY (`the key`, `select`),
  KEY `odd index ü` (`ü col`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
