-- FLOATs that do not survive 6 digits, the ENUM's invalid value, cp1251 0x98, under catch-up
SET @exact_mode = @@SESSION.sql_mode;
SET SESSION sql_mode = '';
UPDATE exact_types SET f = 1e0 / (id + @i + 6), f74 = 1e0 / (id + @i), d = 1e0 / (id + @i), en = @i % 3,
  cy = CONCAT(X'98', @i), t3 = SEC_TO_TIME(IF(@i % 2, 1, -1) * @i * 7.125), bits = @i % 8192,
  j = JSON_OBJECT('x', 1e0 / (@i + 6)) WHERE id = 1 + @i % 67;
UPDATE exact_float_key SET v = v + 1 WHERE f = 0.1434430032968521 OR f = CAST(1e0 / (3 + @i % 40) AS FLOAT);
INSERT INTO exact_float_key VALUES (1e0 / (@i + 1000), @i);
DELETE FROM exact_float_key WHERE f = CAST(1e0 / (@i + 998) AS FLOAT);
UPDATE exact_enum_key SET v = CONCAT('w', @i) WHERE n = 1 + @i % 48;
SET SESSION sql_mode = @exact_mode;
