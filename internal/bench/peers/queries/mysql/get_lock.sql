-- A named session lock: no row, no redo, gone with the connection.
SELECT GET_LOCK(?, 0)
