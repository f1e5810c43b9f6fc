-- Inside the caller's transaction: share-lock the lease row while the token is
-- valid. $1 name, $2 owner, $3 fence. The lock lasts until the caller's
-- transaction ends, so a takeover (an UPDATE of the row) waits for it.
SELECT {{guard}}
