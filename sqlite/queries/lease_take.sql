-- Take over an existing lease that lease_probe.sql read as lapsed, as a
-- compare-and-set on the fence it read (?3): a plain single-row UPDATE that
-- returns nothing, since every value it writes is bound. ?5 is the new
-- fence, max(read fence + 1, Go clock in µs) (docs/adr/0004-fence-floor.md;
-- the same floor lease_acquire.sql takes); ?6 the Go clock in ms, read just
-- before, the start of the new term. A row another writer changed since the
-- read (a takeover, a revoke, a raise) no longer has fence ?3 and nothing
-- changes.
--
-- The old term must have lapsed by ?6, the instant the new term is recorded
-- to start, not merely by the statement's own clock: the statement can wait
-- for the write lock while a renewal extends the term and it then lapses,
-- and a take decided at that later instant but recorded at ?6 would say the
-- new owner acquired the lease while the old term was still valid
-- (TestTakeWaitingForTheLockStartsNoEarlierThanTheLapse; CI's torture saw
-- it). ?6 <= now keeps the database clock the judge: it holds by
-- construction (SQLite's clock is the host's, read later), unless the host
-- clock stepped back, when the take refuses and the upsert decides.
UPDATE {{prefix}}leases
SET owner_token = ?2, holder = ?4, fence_token = ?5, state = 'held',
    leased_until_ms = ?6 + ?7, acquired_at_ms = ?6, updated_at_ms = ?6, renew_count = 0
WHERE lease_name = ?1 AND fence_token = ?3 AND leased_until_ms <= ?6 AND ?6 <= {{now}}
