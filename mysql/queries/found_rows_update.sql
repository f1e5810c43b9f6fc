UPDATE {{prefix}}found_rows_check SET v = 1 WHERE id = 1
