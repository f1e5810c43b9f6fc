INSERT INTO {{prefix}}found_rows_check (id, v) VALUES (1, 1)
