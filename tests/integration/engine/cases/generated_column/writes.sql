-- the applier must not write the VIRTUAL and STORED generated columns
UPDATE gen_totals SET a = a + 1, b = b - 2 WHERE id = 1 + @i % 45;
INSERT INTO gen_totals (id, a, b) VALUES (1000 + @i, @i, @i * 3);
DELETE FROM gen_totals WHERE id = 1000 + @i - 2;
