CREATE TABLE cpk_events (
  tenant INT NOT NULL,
  kind VARCHAR(20) NOT NULL,
  at DATETIME(6) NOT NULL,
  payload VARCHAR(100),
  PRIMARY KEY (tenant, kind, at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
