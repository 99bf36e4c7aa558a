-- a 7 MiB row through catch-up now and then (its full before and after images are in one row event)
UPDATE big_blobs SET txt = CONCAT('round ', @i) WHERE id = 1 AND @i % 15 = 1;
UPDATE big_blobs SET body = CONCAT(LEFT(body, 1000), RANDOM_BYTES(100)) WHERE id = 3 AND @i % 3 = 1;
