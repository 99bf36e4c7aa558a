CREATE TABLE bin_objects (
  id VARBINARY(16) NOT NULL PRIMARY KEY,
  body LONGBLOB,
  flags BIT(10),
  digest BINARY(8)
) ENGINE=InnoDB;
