SELECT RELEASE_LOCK(LEFT(CONCAT('fence_migrate:', COALESCE(DATABASE(), ''), ':', ?), 64))
