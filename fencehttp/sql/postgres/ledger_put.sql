INSERT INTO {{table}} (lease, idem_key, fingerprint, fence_token, status, content_type, body) VALUES ($1, $2, $3, $4, $5, $6, $7)
