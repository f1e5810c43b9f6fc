// Package mcpgo plugs fencemcp into github.com/mark3labs/mcp-go: Transport
// wraps a client transport and stamps each tools/call (the _meta entry on
// every transport, the Fence-Token header on streamable HTTP);
// ToolMiddleware verifies and checks each call before the tool runs and
// turns a stale call into a tool error that says "superseded, do not retry".
//
//	c := client.NewClient(mcpgo.Transport(tr, stamper))
//	s := server.NewMCPServer("tools", "1.0",
//		server.WithToolHandlerMiddleware(mcpgo.ToolMiddleware(guard)))
package mcpgo

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/fencekit/fence/fencemcp"
)

// Transport returns t stamping each tools/call sent with a
// fencemcp.WithCall context. mcp-go has no client middleware; the
// transport is where every request passes, whatever the client did to its
// params before.
func Transport(t transport.Interface, s *fencemcp.Stamper) transport.Interface {
	return &stamping{Interface: t, s: s}
}

type stamping struct {
	transport.Interface
	s *fencemcp.Stamper
}

func (t *stamping) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	if req.Method != string(mcp.MethodToolsCall) {
		return t.Interface.SendRequest(ctx, req)
	}
	// The params are whatever the client built (a struct, a map, raw JSON):
	// go through JSON to add one _meta entry and keep the rest.
	b, err := json.Marshal(req.Params)
	if err != nil {
		return nil, fmt.Errorf("fencemcp: tools/call params: %w", err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, fmt.Errorf("fencemcp: tools/call params are not an object: %w", err)
	}
	var name string
	if err := json.Unmarshal(fields["name"], &name); err != nil {
		return nil, fmt.Errorf("fencemcp: tools/call without a tool name: %w", err)
	}
	e, h, stamped, err := t.s.Stamp(ctx, name)
	if err != nil {
		return nil, err
	}
	if !stamped {
		return t.Interface.SendRequest(ctx, req)
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := fields["_meta"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, fmt.Errorf("fencemcp: tools/call _meta is not an object: %w", err)
		}
	}
	eb, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	meta[fencemcp.MetaKey] = eb
	if fields["_meta"], err = json.Marshal(meta); err != nil {
		return nil, err
	}
	p, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	req.Params = json.RawMessage(p)
	if req.Header == nil {
		req.Header = http.Header{}
	} else {
		req.Header = req.Header.Clone()
	}
	req.Header.Set(fencemcp.HeaderFence, h)
	return t.Interface.SendRequest(ctx, req)
}

// ToolMiddleware admits each tool call through g: a refused call gets an
// isError result with the refusal in its _meta (fencemcp.RefusalKey) and
// the tool does not run; an admitted call's handler finds the claim with
// fencemcp.ClaimFrom. A handler error wrapping a fencemcp refusal (its
// fenced write was refused) is reported the same way.
func ToolMiddleware(g *fencemcp.Guard) server.ToolHandlerMiddleware {
	return func(next server.ToolHandlerFunc) server.ToolHandlerFunc {
		return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var raw any
			if req.Params.Meta != nil {
				if v, ok := req.Params.Meta.AdditionalFields[fencemcp.MetaKey]; ok {
					raw = v
				}
			}
			var header []string
			if req.Header != nil {
				header = req.Header.Values(fencemcp.HeaderFence)
			}
			ctx, err := g.Admit(ctx, raw, req.Params.Name, header)
			if err != nil {
				if res, ok := refusal(err); ok {
					return res, nil
				}
				return nil, err
			}
			res, err := next(ctx, req)
			if err != nil {
				if rr, ok := refusal(err); ok {
					return rr, nil
				}
			}
			return res, err
		}
	}
}

func refusal(err error) (*mcp.CallToolResult, bool) {
	r, ok := fencemcp.Refuse(err)
	if !ok {
		return nil, false
	}
	return &mcp.CallToolResult{
		Result:  mcp.Result{Meta: mcp.NewMetaFromMap(map[string]any{fencemcp.RefusalKey: r})},
		Content: []mcp.Content{mcp.NewTextContent(r.Text(err))},
		IsError: true,
	}, true
}

// Refused reports whether res is a fencemcp refusal, and which.
func Refused(res *mcp.CallToolResult) (fencemcp.Refusal, bool) {
	if res == nil || !res.IsError || res.Meta == nil {
		return fencemcp.Refusal{}, false
	}
	return fencemcp.RefusalFrom(res.Meta.AdditionalFields)
}
