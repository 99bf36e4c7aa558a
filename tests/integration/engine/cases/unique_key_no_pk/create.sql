CREATE TABLE uk_accounts (
  email VARCHAR(100) NOT NULL,
  region CHAR(2) NOT NULL,
  note VARCHAR(50),
  UNIQUE KEY email_region (email, region),
  KEY region (region)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
