\set i random(0,999)
\set r random(1000000000,9999999999)
UPDATE zz_shedlock SET lock_until = timezone('utc', CURRENT_TIMESTAMP) + CAST('60 seconds' AS interval), locked_at = timezone('utc', CURRENT_TIMESTAMP), locked_by = ('o'||:r) WHERE name = ('c'||:i) AND lock_until <= timezone('utc', CURRENT_TIMESTAMP);
UPDATE zz_shedlock SET lock_until = CASE WHEN locked_at + CAST('0 seconds' AS interval) > timezone('utc', CURRENT_TIMESTAMP) THEN locked_at + CAST('0 seconds' AS interval) ELSE timezone('utc', CURRENT_TIMESTAMP) END WHERE name = ('c'||:i) AND locked_by = ('o'||:r);
