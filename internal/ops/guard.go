package ops

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fencekit/fence"
)

// MinTokenLen is the shortest bearer token Guard accepts: a guessable
// token on a non-loopback address is no protection.
const MinTokenLen = 16

// IsLoopback reports whether a listen address HOST:PORT binds only the
// loopback interface. An empty host (":8080") binds every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Guard wraps h for serving on the listen address addr.
//
// On a loopback bind it answers 421 Misdirected Request to a request whose
// Host header names anything but localhost, 127.0.0.1, [::1] or addr's own
// host: a web page that rebinds its own DNS name to 127.0.0.1 (DNS
// rebinding) can then make the victim's browser reach the server, but the
// browser still sends the attacker's name as Host.
//
// With a token, every request but /healthz must carry it, as
// "Authorization: Bearer TOKEN" or as the password of HTTP Basic
// authentication (which a browser asks for once and then sends with the
// page's own requests); the comparison takes constant time. A non-loopback
// bind requires a token: Guard refuses it without one, wrapping
// fence.ErrInvalid. Plain HTTP carries the token in clear; put TLS in front
// of a non-loopback bind.
func Guard(h http.Handler, addr, token string) (http.Handler, error) {
	loopback := IsLoopback(addr)
	if token == "" && !loopback {
		return nil, fmt.Errorf("%w: %s is not a loopback address and no token is set: anyone who can reach it would read every lease; give a bearer token (--token-file PATH or FENCE_SERVE_TOKEN) or bind 127.0.0.1",
			fence.ErrInvalid, addr)
	}
	if token != "" && len(token) < MinTokenLen {
		return nil, fmt.Errorf("%w: the bearer token has %d characters; use at least %d random ones (e.g. openssl rand -hex 32)",
			fence.ErrInvalid, len(token), MinTokenLen)
	}
	g := &guard{next: h, loopback: loopback, hosts: map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}}
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
		g.hosts[strings.ToLower(host)] = true
	}
	if token != "" {
		sum := sha256.Sum256([]byte(token))
		g.token = sum[:]
	}
	return g, nil
}

type guard struct {
	next     http.Handler
	loopback bool
	hosts    map[string]bool
	token    []byte // sha256 of the token; nil: none required
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.loopback && !g.hosts[hostOnly(r.Host)] {
		http.Error(w, "misdirected request: this server answers only to localhost, 127.0.0.1 or [::1]", http.StatusMisdirectedRequest)
		return
	}
	if g.token != nil && r.URL.Path != "/healthz" && !g.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Basic realm="fence", charset="UTF-8"`)
		w.Header().Add("WWW-Authenticate", `Bearer realm="fence"`)
		http.Error(w, "unauthorized: send the server's token as Authorization: Bearer TOKEN", http.StatusUnauthorized)
		return
	}
	g.next.ServeHTTP(w, r)
}

// authorized compares digests, so neither the token's content nor its
// length shows in the time taken.
func (g *guard) authorized(r *http.Request) bool {
	var given string
	if _, pw, ok := r.BasicAuth(); ok {
		given = pw
	} else if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		given = strings.TrimSpace(a[7:])
	} else {
		return false
	}
	sum := sha256.Sum256([]byte(given))
	return subtle.ConstantTimeCompare(sum[:], g.token) == 1
}

// hostOnly is the Host header without its port, lower case, IPv6 without
// brackets.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
}

// LimitRequests answers 503 (with Retry-After: 1) to a request that arrives
// while n others are being served, so that a flood of requests queues
// neither goroutines nor database reads.
func LimitRequests(h http.Handler, n int) http.Handler {
	sem := make(chan struct{}, max(n, 1))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
			h.ServeHTTP(w, r)
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy: too many requests at once; retry", http.StatusServiceUnavailable)
		}
	})
}

// LimitConns returns ln capped at n open connections, and the ConnState hook
// the http.Server must be given for the cap to know which connections are
// idle. When a connection arrives at the cap, the connection idle longest
// (a keep-alive connection between requests, or one that has sent nothing
// yet) is closed to make room; when every connection is busy with a
// request, the new one is closed. Unlike a listener that stops accepting at
// the cap, this keeps a crowd of idle connections from locking a health
// probe out until their timeouts run.
func LimitConns(ln net.Listener, n int) (net.Listener, func(net.Conn, http.ConnState)) {
	l := &connLimit{Listener: ln, max: max(n, 1), conns: map[net.Conn]connInfo{}}
	return l, l.state
}

type connInfo struct {
	idle  bool // new or idle: not inside a request
	since time.Time
}

type connLimit struct {
	net.Listener
	max   int
	mu    sync.Mutex
	conns map[net.Conn]connInfo
}

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		var victim net.Conn
		if len(l.conns) >= l.max {
			var oldest time.Time
			for vc, in := range l.conns {
				if in.idle && (victim == nil || in.since.Before(oldest)) {
					victim, oldest = vc, in.since
				}
			}
			if victim == nil {
				l.mu.Unlock()
				c.Close()
				continue
			}
			delete(l.conns, victim)
		}
		l.conns[c] = connInfo{idle: true, since: time.Now()}
		l.mu.Unlock()
		if victim != nil {
			// The server sees a read error on it and forgets it; a
			// request on it that had begun in the meantime fails, the
			// price of staying reachable.
			victim.Close()
		}
		return c, nil
	}
}

func (l *connLimit) state(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.conns[c]; !ok {
		return // closed to make room, or not from this listener
	}
	switch st {
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
	case http.StateActive:
		l.conns[c] = connInfo{since: time.Now()}
	case http.StateIdle, http.StateNew:
		l.conns[c] = connInfo{idle: true, since: time.Now()}
	}
}

// Open reports how many connections the cap counts now.
func (l *connLimit) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}
