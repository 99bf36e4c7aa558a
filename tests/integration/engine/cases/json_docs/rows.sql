INSERT INTO json_docs VALUES (18446744073709551615, '{"max": "unsigned", "nested": {"a": [1, 2, {"b": null}]}}'),
  (0, '[]'), (1, '"just a string with \\"quotes\\" and ünïcode 🎉"'), (2, '{"num": 1.5e300, "neg": -0.0, "big": 12345678901234567890}'),
  (3, '{"empty": {}, "list": [], "t": true, "f": false, "n": null}');
INSERT INTO json_docs
WITH RECURSIVE n(i) AS (SELECT 10 UNION ALL SELECT i + 1 FROM n WHERE i < 70)
SELECT i, JSON_OBJECT('i', i, 'sq', i * i, 'tags', JSON_ARRAY('t', i, 'ü'), 'pad', REPEAT('x', i * 10)) FROM n;
