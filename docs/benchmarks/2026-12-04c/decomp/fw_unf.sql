UPDATE zz_items SET n = n + 1 WHERE id = 1;
