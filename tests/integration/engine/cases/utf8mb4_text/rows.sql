INSERT INTO u8_names VALUES ('😀 grin', 'emoji 🎉🎉 and 𝄞 clef', 'café'),
  ('Ünïcödé', 'Straße — “quotes” ‘single’', 'naïve'), ('日本語', '漢字とかな', NULL),
  ('عربي', 'من اليمين إلى اليسار', 'plain'), ('a', 'lower', 'a'), ('A', 'upper (binary collation keeps both)', 'A'),
  ('zero\0byte', 'a NUL inside the key', NULL), ('tab\there', 'line\nbreak\r\n', 'x'), ('''quote', 'it''s', ''),
  ('back\\slash', '\\\\ two', '\\');
INSERT INTO u8_names (name, bio)
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 40)
SELECT CONCAT('🙂', i, 'ß'), REPEAT('ñ', i) FROM n;
