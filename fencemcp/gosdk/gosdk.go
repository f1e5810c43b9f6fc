// Package gosdk plugs fencemcp into the official MCP Go SDK
// (github.com/modelcontextprotocol/go-sdk/mcp): ClientMiddleware stamps each
// tools/call, ServerMiddleware verifies and checks it before the tool runs
// and turns a stale call into a tool error that says "superseded, do not
// retry".
//
//	client := mcp.NewClient(impl, nil)
//	client.AddSendingMiddleware(gosdk.ClientMiddleware(stamper))
//	// over streamable HTTP, the header too:
//	tr := &mcp.StreamableClientTransport{Endpoint: url,
//		HTTPClient: &http.Client{Transport: &fencemcp.Transport{}}}
//
//	server := mcp.NewServer(impl, nil)
//	server.AddReceivingMiddleware(gosdk.ServerMiddleware(guard))
package gosdk

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fence/fencemcp"
)

const toolsCall = "tools/call"

// ClientMiddleware is a sending middleware that adds the signed entry to
// each tools/call made with a fencemcp.WithCall context, and puts the
// Fence-Token header value in the context for fencemcp.Transport. A call
// that cannot be stamped fails before it is sent.
func ClientMiddleware(s *fencemcp.Stamper) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != toolsCall {
				return next(ctx, method, req)
			}
			// The client sends its params as the Params interface.
			r, ok := req.(*mcp.ClientRequest[mcp.Params])
			if !ok {
				return nil, fmt.Errorf("fencemcp: tools/call request of type %T, not stamped; this go-sdk version is not supported", req)
			}
			params, ok := r.Params.(*mcp.CallToolParams)
			if !ok || params == nil {
				return nil, fmt.Errorf("fencemcp: tools/call params of type %T, not stamped; this go-sdk version is not supported", r.Params)
			}
			e, h, stamped, err := s.Stamp(ctx, params.Name)
			if err != nil {
				return nil, err
			}
			if !stamped {
				return next(ctx, method, req)
			}
			// A copy: the caller's params may be reused for a retry.
			p := *params
			meta := mcp.Meta{}
			for k, v := range params.Meta {
				meta[k] = v
			}
			meta[fencemcp.MetaKey] = e
			p.Meta = meta
			r2 := *r
			r2.Params = &p
			return next(fencemcp.WithHeader(ctx, h), method, &r2)
		}
	}
}

// ServerMiddleware is a receiving middleware that admits each tools/call
// through g: a refused call gets an isError result with the refusal in its
// _meta (fencemcp.RefusalKey) and the tool does not run; an admitted call's
// handler finds the claim with fencemcp.ClaimFrom. A tool that returns an
// error wrapping a fencemcp refusal (fencemcp.LeaseChecker.InTx refused its
// write) is reported the same way.
func ServerMiddleware(g *fencemcp.Guard) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != toolsCall {
				return next(ctx, method, req)
			}
			r, ok := req.(*mcp.CallToolRequest)
			if !ok || r.Params == nil {
				return next(ctx, method, req)
			}
			var header []string
			if r.Extra != nil && r.Extra.Header != nil {
				header = r.Extra.Header.Values(fencemcp.HeaderFence)
			}
			var raw any
			if v, ok := r.Params.Meta[fencemcp.MetaKey]; ok {
				raw = v
			}
			ctx, err := g.Admit(ctx, raw, r.Params.Name, header)
			if err != nil {
				if res, ok := refusal(err); ok {
					return res, nil
				}
				return nil, err
			}
			res, err := next(ctx, method, req)
			if err != nil {
				if rr, ok := refusal(err); ok {
					return rr, nil
				}
				return res, err
			}
			if tr, ok := res.(*mcp.CallToolResult); ok && tr.IsError {
				if rr, ok := refusal(tr.GetError()); ok {
					return rr, nil
				}
			}
			return res, nil
		}
	}
}

func refusal(err error) (*mcp.CallToolResult, bool) {
	r, ok := fencemcp.Refuse(err)
	if !ok {
		return nil, false
	}
	return &mcp.CallToolResult{
		Meta:    mcp.Meta{fencemcp.RefusalKey: r},
		Content: []mcp.Content{&mcp.TextContent{Text: r.Text(err)}},
		IsError: true,
	}, true
}

// Refused reports whether res is a fencemcp refusal, and which.
func Refused(res *mcp.CallToolResult) (fencemcp.Refusal, bool) {
	if res == nil || !res.IsError {
		return fencemcp.Refusal{}, false
	}
	return fencemcp.RefusalFrom(res.Meta)
}
