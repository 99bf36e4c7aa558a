-- BIT values and blobs changed under catch-up (the binlog carries BIT as packed bytes)
UPDATE bin_objects SET flags = @i % 1024, body = RANDOM_BYTES(1 + @i % 200) WHERE id = UNHEX(MD5(1 + @i % 60));
INSERT INTO bin_objects VALUES (UNHEX(MD5(CONCAT('w', @i))), RANDOM_BYTES(50), b'1010101010', NULL);
DELETE FROM bin_objects WHERE id = UNHEX(MD5(CONCAT('w', @i - 3)));
