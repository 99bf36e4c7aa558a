-- the row with AUTO_INCREMENT id 0 keeps its id through REPLACE on the target
UPDATE null_things SET n_int = @i, n_text = NULL WHERE id = 0;
UPDATE null_things SET n_int = NULL, n_dt = NOW(3) WHERE id = 1 + @i % 50;
