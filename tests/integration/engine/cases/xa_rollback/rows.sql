INSERT INTO xa_rows VALUES (1, 'seed'), (2, 'seed');
