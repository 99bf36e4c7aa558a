SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_AUTO_VALUE_ON_ZERO');
INSERT INTO null_things (id) VALUES (0);
INSERT INTO null_things (n_int, n_text, n_date, n_dt, n_dec, n_float, n_blob, n_json, n_enum, n_set, n_ts, n_time, n_year)
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50)
SELECT IF(i % 2, NULL, i), IF(i % 3, NULL, ''), IF(i % 4, NULL, '2020-02-29'), IF(i % 5, NULL, '1999-12-31 23:59:59.999'),
       IF(i % 2, NULL, -12345678.1234), IF(i % 3, NULL, 1.0 / 3), IF(i % 2, NULL, 0x00), IF(i % 3, NULL, 'null'),
       IF(i % 2, NULL, 'b'), IF(i % 3, NULL, 'x,y'), IF(i % 4, NULL, '2038-01-19 03:14:07'), IF(i % 2, NULL, '-838:59:59.99'),
       IF(i % 2, NULL, 1901) FROM n;
