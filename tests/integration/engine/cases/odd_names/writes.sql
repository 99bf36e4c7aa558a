UPDATE `odd name ``q`` ü.select` SET `ü col` = @i, `back``tick` = CONCAT('``', @i) WHERE `the key` = 1 + @i % 40;
INSERT INTO `odd name ``q`` ü.select` VALUES (1000 + @i, 'w', NULL, NULL, @i);
DELETE FROM `odd name ``q`` ü.select` WHERE `the key` = 1000 + @i - 2;
