INSERT INTO mixed_charsets VALUES (1, 'déjà vu', 'Привет', 'ñandú', 'raw\0bytes'), (2, NULL, 'мир', NULL, NULL);
INSERT INTO mixed_charsets
WITH RECURSIVE n(i) AS (SELECT 3 UNION ALL SELECT i + 1 FROM n WHERE i < 40)
SELECT i, CONCAT('é', i), CONCAT('ж', i), CONCAT('ü', i), UNHEX(MD5(i)) FROM n;
