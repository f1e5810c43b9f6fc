DROP TEMPORARY TABLE IF EXISTS {{prefix}}found_rows_check
