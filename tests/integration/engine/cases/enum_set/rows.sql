INSERT INTO enum_sets
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 40)
SELECT i, 1 + i % 5, IF(i % 4, i % 16, NULL), IF(i % 3, 1 + (i * 7) % 260, NULL), IF(i % 2, i * 1234567, NULL) FROM n;
