UPDATE money SET amount = amount + 0.000000000000000000000000000001 * @i, small = (@i % 1999 - 999) / 100 WHERE id = 4 + @i % 36;
