CASE WHEN pg_try_advisory_xact_lock(hashtext('{{prefix}}release'), hashtext(l.lease_name)) THEN 0
 ELSE length(pg_notify('{{prefix}}release', l.lease_name)::text) END
