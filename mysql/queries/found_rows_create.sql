-- CLIENT_FOUND_ROWS is a client capability that no variable shows, so
-- CheckSession tests it on a table of its own connection: a row updated to
-- the value it already has counts 1 affected row with it and 0 without.
CREATE TEMPORARY TABLE {{prefix}}found_rows_check (id INT PRIMARY KEY, v INT NOT NULL)
