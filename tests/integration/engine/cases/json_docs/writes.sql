UPDATE json_docs SET doc = JSON_SET(doc, '$.round', @i, '$.s', CONCAT('ü "q" ', @i)) WHERE id = 10 + @i % 60;
REPLACE INTO json_docs VALUES (5000 + @i % 7, JSON_OBJECT('r', @i, 'arr', JSON_ARRAY(1.5, NULL, TRUE, 'x')));
