-- The server's version string (CheckSession): MariaDB's carries
-- "-MariaDB" ("10.11.6-MariaDB-0+deb12u1"), MySQL's does not ("8.0.36").
SELECT VERSION()
