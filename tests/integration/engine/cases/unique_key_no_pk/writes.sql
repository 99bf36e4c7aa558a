-- a table keyed by a NOT NULL unique key only: catch-up and verify key it by that
UPDATE uk_accounts SET note = CONCAT('r', @i) WHERE email = CONCAT('user', @i % 30, '@example.com') AND region = 'eu';
INSERT INTO uk_accounts VALUES (CONCAT('new', @i, '@example.com'), 'us', NULL);
DELETE FROM uk_accounts WHERE email = CONCAT('new', @i - 2, '@example.com');
UPDATE uk_accounts SET region = 'zz' WHERE email = CONCAT('new', @i - 1, '@example.com');
