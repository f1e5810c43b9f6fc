SELECT COALESCE(MAX(version), 0) FROM {{prefix}}schema
