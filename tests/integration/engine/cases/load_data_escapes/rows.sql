SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_AUTO_VALUE_ON_ZERO');
INSERT INTO escapes VALUES (0, '', '', '', 0, 0, '2000-01-01 00:00:00.000001', b'0', b'0', '', '{}');
INSERT INTO escapes (t, l, b, f, d, dt6, b1, b64, e, j) VALUES
  ('\\N', '\\N', 0x5C4E, 1.1, 1e308, '2038-01-19 03:14:07.999999', b'1', 0xFFFFFFFFFFFFFFFF, 'a\tb', '{"k": "a\\tb\\n"}'),
  ('tab\there', 'caf\xE9 \t', 0x09, -3.4e38, -2.2250738585072014e-308, '1000-01-01 00:00:00.000000', NULL, 0x8000000000000000, 'x', '"\\\\"'),
  ('new\nline\r\n', 'new\nline', 0x0A0D, 1.17549435e-38, 0.1, NULL, b'0', 1, NULL, NULL),
  ('back\\slash\\', 'back\\', 0x5C, NULL, NULL, '9999-12-31 23:59:59.999999', NULL, NULL, '', '[1, 2.5e-10]'),
  ('nul\0byte', 'z\0', 0x00, 3.14159, 2.718281828459045, '2020-02-29 12:00:00.5', b'1', 12345678901234, 'x', '"ü"'),
  (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
  ('\\', '\\\\', 0x5C5C09, 0, -0, '1970-01-01 00:00:01', b'0', 0, 'a\tb', 'null');
INSERT INTO escapes (t, l, b, f, d, dt6, b1, b64, e, j)
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 40)
SELECT CONCAT('r', i, CHAR(9), REPEAT('\\', i % 3), CHAR(10)), CONCAT('é', i), UNHEX(MD5(i)), i / 7, i / 3,
       NOW(6) - INTERVAL i SECOND, i % 2, i * 1000003, IF(i % 2, 'x', ''), JSON_OBJECT('i', i) FROM n;
INSERT INTO trailing_empty (id)
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30)
SELECT i FROM n;
INSERT INTO escapes (t, l, b, j) VALUES
  (REPEAT('long\ttext\\with\nescapes ', 400), REPEAT('\\', 40), REPEAT(0x5C090A00, 10), JSON_ARRAY(REPEAT('x\ty\n', 2000))),
  (REPEAT('\n', 4097), '', '', '""');
