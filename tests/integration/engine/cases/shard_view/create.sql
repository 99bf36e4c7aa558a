-- a view (and a view on it) in a moving shard: carried by the copy under its DEFINER
CREATE TABLE view_base (
  id INT NOT NULL PRIMARY KEY,
  grp INT NOT NULL,
  amount INT NOT NULL
) ENGINE=InnoDB;
CREATE VIEW view_totals AS SELECT grp, SUM(amount) AS total, COUNT(*) AS n FROM view_base GROUP BY grp;
CREATE SQL SECURITY INVOKER VIEW view_big AS SELECT grp, total FROM view_totals WHERE total > 100;
-- stored routines of the shard: carried too
CREATE FUNCTION view_double(x INT) RETURNS INT DETERMINISTIC RETURN x * 2;
CREATE PROCEDURE view_count() SELECT COUNT(*) FROM view_base;
