INSERT INTO geo_places
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30)
SELECT i, ST_PointFromText(CONCAT('POINT(', i, ' ', -i / 3, ')'), 4326),
       IF(i % 2, NULL, ST_PolygonFromText('POLYGON((0 0, 10 0, 10 10, 0 10, 0 0))')),
       IF(i % 3, ST_GeomFromText('LINESTRING(0 0, 1 1, 2 2)'), NULL) FROM n;
