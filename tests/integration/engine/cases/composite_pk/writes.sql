-- DATETIME(6) in the key: microseconds must survive
INSERT INTO cpk_events VALUES (@i % 3, 'w', TIMESTAMP('2025-01-01') + INTERVAL @i SECOND + INTERVAL @i * 7 MICROSECOND, CONCAT('w', @i));
UPDATE cpk_events SET at = at + INTERVAL 1 MICROSECOND WHERE kind = 'w' AND payload = CONCAT('w', @i - 1);
