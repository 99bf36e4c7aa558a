INSERT INTO jobs_case_p0 (state, body, updated_at, created_at, run_after) VALUES (@i % 3, CONCAT('w', @i), NOW(6), NOW(6), NOW(6));
UPDATE jobs_case_p0 SET attempts_left = attempts_left - 1 WHERE local_id = 1 + @i % 100;
