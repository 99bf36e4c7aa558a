INSERT INTO jobs_case_p0 (state, body, updated_at, created_at, run_after)
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 150)
SELECT i % 4, CONCAT('job ', i), TIMESTAMP('2023-12-31 20:00:00') + INTERVAL (i * 97) SECOND,
       TIMESTAMP('2023-12-31') + INTERVAL i SECOND, TIMESTAMP('2024-01-01') + INTERVAL i MINUTE FROM n;
-- a job that changed state keeps its local_id: two rows may share it across states
INSERT INTO jobs_case_p0 (local_id, state, body, updated_at, created_at, run_after)
SELECT local_id, 2, body, updated_at + INTERVAL 1 HOUR, created_at, run_after FROM jobs_case_p0 WHERE state = 1 LIMIT 10;
INSERT INTO jobs_case_p0 (state, body, updated_at, created_at, run_after) VALUES (9, 'catch-all', NOW(6), NOW(6), NOW(6));
