INSERT INTO `odd name ``q`` ü.select`
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 40)
SELECT i, CONCAT('s', i % 3), i * 2, CONCAT('`', i), -i FROM n;
