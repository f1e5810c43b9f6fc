-- ShedLock's unlock with lockAtLeastFor 0. Parameters: name, holder.
UPDATE zz_shed SET lock_until = UTC_TIMESTAMP(3) WHERE name = ? AND locked_by = ?
