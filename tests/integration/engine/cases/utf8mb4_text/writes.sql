INSERT INTO u8_names VALUES (CONCAT('🎉 ', @i), CONCAT('𝄞 round ', @i, ' ', REPEAT('ß', @i % 9)), CONCAT('é', @i))
  ON DUPLICATE KEY UPDATE bio = CONCAT(bio, '!');
UPDATE u8_names SET bio = CONCAT('日本 ', @i) WHERE name = '日本語';
DELETE FROM u8_names WHERE name = CONCAT('🎉 ', @i - 4);
