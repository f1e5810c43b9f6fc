-- The connection settings fence relies on (CheckSession): the main
-- database's file ('' in memory), its journal mode and the connection's
-- synchronous level (0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA).
SELECT (SELECT file FROM pragma_database_list WHERE name = 'main'),
       (SELECT journal_mode FROM pragma_journal_mode),
       (SELECT synchronous FROM pragma_synchronous)
