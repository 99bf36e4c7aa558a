UPDATE moments SET dt6 = dt6 + INTERVAL 1 MICROSECOND, ts6 = NOW(6), t6 = SEC_TO_TIME(@i + 0.123456) WHERE id = 4 + @i % 36;
