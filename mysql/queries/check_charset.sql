-- The character set in which the server reads the statement text (CheckSession).
SELECT @@session.character_set_client
