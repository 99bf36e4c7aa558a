INSERT INTO cpk_events (tenant, kind, at, payload)
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 120)
SELECT i % 3, CONCAT('k', i % 7), TIMESTAMP('2024-01-01') + INTERVAL (i * 37) SECOND + INTERVAL i MICROSECOND,
       CONCAT('payload ', i) FROM n;
