// Package harness connects an MCP client to an MCP server, for each SDK
// (the official go-sdk, mark3labs/mcp-go) over each transport (stdio over
// in-process pipes, streamable HTTP over loopback), with or without
// fencemcp's middleware, serving one tool. The tests, the zombie-agent
// suite and the benchmarks all go through it, so each runs the same
// scenario on all four combinations.
package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	mcpgoclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencekit/fence/fencemcp"
	"github.com/fencekit/fence/fencemcp/gosdk"
	fmcpgo "github.com/fencekit/fence/fencemcp/mcpgo"
)

// SDKs and transports.
const (
	GoSDK = "gosdk"
	MCPGo = "mcpgo"
	Stdio = "stdio"
	HTTP  = "http"
)

// Combos is every SDK × transport.
var Combos = [][2]string{{GoSDK, Stdio}, {GoSDK, HTTP}, {MCPGo, Stdio}, {MCPGo, HTTP}}

// ToolName is the one tool the server serves.
const ToolName = "apply"

// Args are the tool's arguments. Epoch and Step are what an unfenced
// client sends in its arguments (the control run); a fenced tool takes
// them from the verified claim instead.
type Args struct {
	Payload string `json:"payload"`
	Epoch   int64  `json:"epoch,omitempty"`
	Step    string `json:"step,omitempty"`
}

// Tool is the tool's body. Its ctx carries the claim (fencemcp.ClaimFrom)
// when the server has the middleware.
type Tool func(ctx context.Context, a Args) (string, error)

// Options of one connection.
type Options struct {
	SDK, Wire string
	Stamper   *fencemcp.Stamper // nil: the client sends no entry
	Guard     *fencemcp.Guard   // nil: the server checks nothing
	Tool      Tool
}

// Outcome of one call as the client saw it.
type Outcome struct {
	Text    string
	IsError bool
	Refused bool
	Refusal fencemcp.Refusal
}

// Conn is a connected client.
type Conn struct {
	call    func(ctx context.Context, a Args) (Outcome, error)
	closers []func()

	mu      sync.Mutex
	headers []string // Fence-Token values the HTTP server received
	url     string   // the HTTP server's endpoint, for Dial
}

// URL is the streamable-HTTP endpoint of the connection's server ("" over
// stdio), for another process to Dial.
func (c *Conn) URL() string { return c.url }

// FenceHeaders returns the Fence-Token header values the server received
// over HTTP so far, one per request that had one.
func (c *Conn) FenceHeaders() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.headers...)
}

// record wraps an HTTP handler to keep the Fence-Token values it receives.
func (c *Conn) record(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get(fencemcp.HeaderFence); v != "" {
			c.mu.Lock()
			c.headers = append(c.headers, v)
			c.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

// Call calls the tool with a.
func (c *Conn) Call(ctx context.Context, a Args) (Outcome, error) { return c.call(ctx, a) }

// Close closes the client and the server.
func (c *Conn) Close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
}

// Start connects a client to a server as o says; both stop at cleanup.
func Start(t testing.TB, o Options) *Conn {
	t.Helper()
	var c *Conn
	var err error
	switch o.SDK {
	case GoSDK:
		c, err = startGoSDK(o)
	case MCPGo:
		c, err = startMCPGo(o)
	default:
		err = fmt.Errorf("unknown SDK %q", o.SDK)
	}
	if err != nil {
		t.Fatalf("harness %s/%s: %v", o.SDK, o.Wire, err)
	}
	t.Cleanup(c.Close)
	return c
}

// pipes returns the two ends of a stdio connection: what the client
// writes the server reads, and back.
func pipes() (cr io.ReadCloser, cw io.WriteCloser, sr io.ReadCloser, sw io.WriteCloser) {
	sr, cw = io.Pipe()
	cr, sw = io.Pipe()
	return
}

func startGoSDK(o Options) (*Conn, error) {
	ctx := context.Background()
	srv := mcp.NewServer(&mcp.Implementation{Name: "harness", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: ToolName, Description: "apply an effect"},
		func(ctx context.Context, _ *mcp.CallToolRequest, a Args) (*mcp.CallToolResult, any, error) {
			out, err := o.Tool(ctx, a)
			if err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: out}}}, nil, nil
		})
	if o.Guard != nil {
		srv.AddReceivingMiddleware(gosdk.ServerMiddleware(o.Guard))
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	if o.Stamper != nil {
		cl.AddSendingMiddleware(gosdk.ClientMiddleware(o.Stamper))
	}
	c := &Conn{}
	var tr mcp.Transport
	switch o.Wire {
	case Stdio:
		cr, cw, sr, sw := pipes()
		ss, err := srv.Connect(ctx, &mcp.IOTransport{Reader: sr, Writer: sw}, nil)
		if err != nil {
			return nil, err
		}
		c.closers = append(c.closers, func() { ss.Close() })
		tr = &mcp.IOTransport{Reader: cr, Writer: cw}
	case HTTP:
		h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
		hs := httptest.NewServer(c.record(h))
		c.closers = append(c.closers, hs.Close)
		c.url = hs.URL
		tr = &mcp.StreamableClientTransport{Endpoint: hs.URL, DisableStandaloneSSE: true,
			HTTPClient: &http.Client{Transport: &fencemcp.Transport{}}}
	default:
		return nil, fmt.Errorf("unknown transport %q", o.Wire)
	}
	if err := goSDKClient(ctx, c, cl, tr); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func goSDKClient(ctx context.Context, c *Conn, cl *mcp.Client, tr mcp.Transport) error {
	cs, err := cl.Connect(ctx, tr, nil)
	if err != nil {
		return err
	}
	c.closers = append(c.closers, func() { cs.Close() })
	c.call = func(ctx context.Context, a Args) (Outcome, error) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: ToolName, Arguments: a})
		if err != nil {
			return Outcome{}, err
		}
		out := Outcome{IsError: res.IsError}
		for _, ct := range res.Content {
			if tc, ok := ct.(*mcp.TextContent); ok {
				out.Text += tc.Text
			}
		}
		out.Refusal, out.Refused = gosdk.Refused(res)
		return out, nil
	}
	return nil
}

func startMCPGo(o Options) (*Conn, error) {
	ctx := context.Background()
	var sopts []mcpgoserver.ServerOption
	if o.Guard != nil {
		sopts = append(sopts, mcpgoserver.WithToolHandlerMiddleware(fmcpgo.ToolMiddleware(o.Guard)))
	}
	srv := mcpgoserver.NewMCPServer("harness", "1", sopts...)
	srv.AddTool(mcpgo.NewTool(ToolName, mcpgo.WithDescription("apply an effect"),
		mcpgo.WithString("payload"), mcpgo.WithNumber("epoch"), mcpgo.WithString("step")),
		func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			var a Args
			if err := req.BindArguments(&a); err != nil {
				return mcpgo.NewToolResultError(err.Error()), nil
			}
			out, err := o.Tool(ctx, a)
			if err != nil {
				if _, ok := fencemcp.Refuse(err); ok {
					return nil, err // the middleware makes it a refusal result
				}
				return mcpgo.NewToolResultError(err.Error()), nil
			}
			return mcpgo.NewToolResultText(out), nil
		})
	c := &Conn{}
	var tr transport.Interface
	switch o.Wire {
	case Stdio:
		cr, cw, sr, sw := pipes()
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = mcpgoserver.NewStdioServer(srv).Listen(sctx, sr, sw)
		}()
		c.closers = append(c.closers, func() { cancel(); sr.Close(); sw.Close(); <-done })
		tr = transport.NewIO(cr, cw, io.NopCloser(strings.NewReader("")))
	case HTTP:
		hs := httptest.NewServer(c.record(mcpgoserver.NewStreamableHTTPServer(srv)))
		c.closers = append(c.closers, hs.Close)
		c.url = hs.URL + "/mcp"
		var err error
		tr, err = transport.NewStreamableHTTP(c.url)
		if err != nil {
			c.Close()
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown transport %q", o.Wire)
	}
	if err := mcpGoClient(ctx, c, tr, o.Stamper); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func mcpGoClient(ctx context.Context, c *Conn, tr transport.Interface, st *fencemcp.Stamper) error {
	if st != nil {
		tr = fmcpgo.Transport(tr, st)
	}
	cl := mcpgoclient.NewClient(tr)
	if err := cl.Start(ctx); err != nil {
		return err
	}
	c.closers = append(c.closers, func() { cl.Close() })
	if _, err := cl.Initialize(ctx, mcpgo.InitializeRequest{Params: mcpgo.InitializeParams{
		ProtocolVersion: mcpgo.LATEST_PROTOCOL_VERSION,
		ClientInfo:      mcpgo.Implementation{Name: "agent", Version: "1"},
	}}); err != nil {
		return err
	}
	c.call = func(ctx context.Context, a Args) (Outcome, error) {
		req := mcpgo.CallToolRequest{}
		req.Params.Name = ToolName
		req.Params.Arguments = a
		res, err := cl.CallTool(ctx, req)
		if err != nil {
			return Outcome{}, err
		}
		out := Outcome{IsError: res.IsError}
		for _, ct := range res.Content {
			if tc, ok := ct.(mcpgo.TextContent); ok {
				out.Text += tc.Text
			}
		}
		out.Refusal, out.Refused = fmcpgo.Refused(res)
		return out, nil
	}
	return nil
}

// Dial connects a client (of sdk, stamping with st if not nil) to the
// streamable-HTTP server at url: an agent in another process.
func Dial(ctx context.Context, sdk, url string, st *fencemcp.Stamper) (*Conn, error) {
	c := &Conn{url: url}
	var err error
	switch sdk {
	case GoSDK:
		cl := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
		if st != nil {
			cl.AddSendingMiddleware(gosdk.ClientMiddleware(st))
		}
		err = goSDKClient(ctx, c, cl, &mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true,
			HTTPClient: &http.Client{Transport: &fencemcp.Transport{}}})
	case MCPGo:
		var tr transport.Interface
		if tr, err = transport.NewStreamableHTTP(url); err == nil {
			err = mcpGoClient(ctx, c, tr, st)
		}
	default:
		err = fmt.Errorf("unknown SDK %q", sdk)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// ErrLost marks a call whose response the test dropped.
var ErrLost = errors.New("harness: response lost")
