INSERT INTO gen_totals (id, a, b)
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 45)
SELECT i, i * 2, -i FROM n;
