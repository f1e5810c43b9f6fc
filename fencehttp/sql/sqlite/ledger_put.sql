INSERT INTO {{table}} (lease, idem_key, fingerprint, fence_token, status, content_type, body) VALUES (?, ?, ?, ?, ?, ?, ?)
