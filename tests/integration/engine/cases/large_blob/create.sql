-- rows of several MiB (max_allowed_packet is 16 MiB on the sandbox)
CREATE TABLE big_blobs (
  id INT NOT NULL PRIMARY KEY,
  body LONGBLOB NOT NULL,
  txt LONGTEXT CHARACTER SET utf8mb4 NULL
) ENGINE=InnoDB;
