// Package fencehttp carries a lease's fence across HTTP so that a service
// you own can refuse a stale holder's request. Without it, a stale worker's
// call to another service is an unfenced side effect.
//
// The holder side signs its token into a Fence-Token header (Sign, or
// Transport/Client for every request made inside a fence.Run job). The
// header holds the fence, a digest of the owner and an HMAC-SHA256 over
// lease, fence and owner under a key the two sides share; the owner token
// itself is never sent. A party that relays a fence it verified rather
// than holds (an MCP server passing the caller's epoch downstream) signs
// the Claim instead, under the downstream service's key (SignClaim,
// OwnerID). The receiving side decides which lease guards a
// request (server configuration or the route, never a client header),
// verifies the signature for that lease and then checks the fence in one
// of two ways:
//
//   - Guard, for a handler that writes to a database: the write runs in a
//     transaction that first raises the lease's row in a fence table (as
//     fence.ExecResource does with a fence_token column) and refuses a
//     lower fence. The check and the write commit together, across
//     processes and restarts.
//   - Memory, for an effect inside one process: a per-lease lock held from
//     the check until the handler returns. It does not protect an effect
//     that outlives the handler, nor anything across replicas or restarts.
//
// A check that returns before the effect it protects is not a fence: a
// request that stalls between the two runs after a newer holder's request.
// Both checkers therefore hold the lease from the check to the end of the
// effect.
//
// Refusals are RFC 9457 problem details (application/problem+json, types
// in problem.go): 428 without a Fence-Token, 400 for a malformed one (a
// sign, leading zeros, spaces, overflow, a repeated header, missing parts),
// 403 for a signature that does not match, 412 for a stale fence (never
// retry: a newer holder has written), 503 when the check cannot be made
// (full memory, database error, request ended while waiting). 409 is kept
// for what the Idempotency-Key draft means by it, a request with the same
// key in flight (Ledger). The client side reads a refusal with
// CheckResponse: a stale fence is fence.ErrStale, definite, not retryable.
//
// Ledger stores each Idempotency-Key's response in the transaction of the
// handler's write and the fence check (the rule of package task's effect
// ledger): a newer fence retrying a key gets the stored response and the
// handler does not run again; an older fence is refused with 412; the same
// key for another request is 422. Transport sends a key that leaves the
// fence out when the request's context names its step (WithStep).
// Ledger.Do applies the same rule to a call that is not an HTTP request (an
// MCP tool call) whose claim the caller verified.
//
// Holder side:
//
//	// publish is the holder: every request made inside the job carries the
//	// signed fence.
//	func publish(ctx context.Context, store *fence.Store, key []byte, url string) (fence.Result, error) {
//		c := fencehttp.Client(key, nil)
//		return fence.Run(ctx, store, "publisher", func(ctx context.Context) error {
//			req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader("hello"))
//			if err != nil {
//				return err
//			}
//			resp, err := c.Do(req)
//			if err != nil {
//				return err
//			}
//			defer resp.Body.Close()
//			if err := fencehttp.CheckResponse(resp); err != nil {
//				return err // 412 is fence.ErrStale: a newer fence published; do not retry
//			}
//			if resp.StatusCode != http.StatusOK {
//				return fmt.Errorf("publish: %s", resp.Status)
//			}
//			return nil
//		})
//	}
//
// Receiving side:
//
//	// receiver is the service: the handler's write commits in the transaction
//	// that raised the lease's fence row, or not at all.
//	func receiver(ctx context.Context, db *sql.DB, key []byte) (*http.ServeMux, error) {
//		v, err := fencehttp.NewVerifier(key, func(*http.Request) string { return "publisher" })
//		if err != nil {
//			return nil, err
//		}
//		g, err := fencehttp.NewGuard(v, db, fence.Postgres, "publish_fences")
//		if err != nil {
//			return nil, err
//		}
//		if err := g.CreateTable(ctx); err != nil {
//			return nil, err
//		}
//		mux := http.NewServeMux()
//		mux.Handle("POST /publish", g.Handler(func(w http.ResponseWriter, r *http.Request, tx *sql.Tx) error {
//			body, err := io.ReadAll(r.Body)
//			if err != nil {
//				return err
//			}
//			_, err = tx.ExecContext(r.Context(), `UPDATE feed SET body = $1`, body)
//			return err // nil commits the write and the fence together
//		}))
//		return mux, nil
//	}
//
// The signature proves the fence was issued by a key holder, not that the
// request is fresh: anyone who reads a request can replay it. Use TLS.
package fencehttp
