CREATE TABLE dd_prices (
  price DECIMAL(10, 2) NOT NULL,
  day DATE NOT NULL,
  t TIME(3) NOT NULL,
  qty FLOAT NOT NULL,
  PRIMARY KEY (price, day, t)
) ENGINE=InnoDB;
