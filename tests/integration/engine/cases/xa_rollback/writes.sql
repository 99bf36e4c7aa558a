-- prepared, then rolled back: must never reach the target
XA START 'cases_xa_rb';
INSERT INTO xa_rows VALUES (100000 + @i, 'rolled back');
UPDATE xa_rows SET what = 'rolled back' WHERE id = 1;
XA END 'cases_xa_rb';
XA PREPARE 'cases_xa_rb';
XA ROLLBACK 'cases_xa_rb';
-- prepared, then committed: applied
XA START 'cases_xa_c';
INSERT INTO xa_rows VALUES (200000 + @i, 'committed');
XA END 'cases_xa_c';
XA PREPARE 'cases_xa_c';
XA COMMIT 'cases_xa_c';
