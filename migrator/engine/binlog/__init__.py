"""Reading a master's binlog: framed events, row images decoded to SQL literals, whole transactions.

- :mod:`.client` frames events off a MariaDB binlog dump connection (GTID start,
  heartbeats, CRC32 checked, no silent reconnect);
- :mod:`.rows` parses table maps and turns row images into SQL literals with a
  decoder generated per table shape;
- :mod:`.reader` assembles whole transactions of the kept tables (XA held until
  its outcome), tracks the GTID position, and runs as its own process for catch-up.

Used by catch-up (:mod:`migrator.engine.catch_up`), by verify and the cutover
for the keys a binlog segment changed, and by anything that samples write rates.
"""
