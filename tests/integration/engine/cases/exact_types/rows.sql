SET SESSION sql_mode = '';
INSERT INTO exact_types
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 67)
SELECT i, UUID(), INET6_ATON(CONCAT('2001:db8::', HEX(i))), ST_PointFromText(CONCAT('POINT(', 1e0 / i, ' ', 1e0 / 3, ')')),
       JSON_OBJECT('x', 1e0 / (i + 6), 'i', i), i * 61 % 8192, 1901 + i, SEC_TO_TIME(IF(i % 2, 1, -1) * i * 1000.123),
       1e0 / (i + 6), 1e0 / (i + 6), 1e0 / (i + 6), 1e0 / (i + 6), 18446744073709551615 - i, UNHEX(MD5(i)),
       i % 16, IF(i % 3 = 0, 0, i % 3), NOW(6) - INTERVAL i SECOND, NOW(6) - INTERVAL i MINUTE,
       CONCAT('caf', X'E9', ' ', X'81', i), CONCAT(X'98', 'ж', i) FROM n;
-- the FLOAT the split once lost, and its neighbour with the same 6 digits
UPDATE exact_types SET f = 0.14344295859336853 WHERE id = 1;
UPDATE exact_types SET f = 0.1434430032968521 WHERE id = 2;
INSERT INTO exact_float_key
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 40)
SELECT 1e0 / (i + 2), i FROM n;
INSERT INTO exact_float_key VALUES (0.14344295859336853, 100), (0.1434430032968521, 101);
INSERT INTO exact_enum_key
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 48)
SELECT 1 + i % 4, i, CONCAT('v', i) FROM n;
