UPDATE enum_sets SET e = 1 + @i % 5, s = @i % 16, big = 1 + @i % 260, many = @i * 99991 WHERE id = 1 + @i % 40;
