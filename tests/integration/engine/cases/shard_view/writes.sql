UPDATE view_base SET amount = amount + 1 WHERE id = 1 + @i % 50;
