INSERT INTO uk_accounts
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 80)
SELECT CONCAT('user', i % 30, '@example.com'), ELT(1 + i % 3, 'us', 'eu', 'ap'), IF(i % 5, NULL, 'five') FROM n
ON DUPLICATE KEY UPDATE note = 'dup';
