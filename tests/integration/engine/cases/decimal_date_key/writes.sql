UPDATE dd_prices SET qty = qty + 0.5 WHERE price = (SELECT MIN(price) FROM (SELECT price FROM dd_prices) x);
INSERT IGNORE INTO dd_prices VALUES (99999999.99 - @i, '9999-12-31', '838:59:59.999', -1e30);
