UPDATE mixed_charsets SET l1 = CONCAT('àé', @i), cy = CONCAT('жи', @i), u3 = CONCAT('ñ', @i), bin_text = UNHEX(MD5(@i)) WHERE id = 3 + @i % 38;
