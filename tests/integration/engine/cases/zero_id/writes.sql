-- an update of the id-0 row reaches the target as a REPLACE of id 0: it must stay 0
UPDATE zero_ids SET v = @i WHERE id = 0;
INSERT INTO zero_ids (v) VALUES (@i);
