-- The main database's file as SQLite names it (a full path; '' in memory):
-- the key under which this process's waiters for a lease are woken.
SELECT file FROM pragma_database_list WHERE name = 'main'
