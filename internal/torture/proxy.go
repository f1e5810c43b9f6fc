package torture

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// proxy is a TCP proxy between the clients and the database that the
// harness controls: reset every connection, black-hole traffic for a while,
// or add latency. It is small enough to write here rather than pull in
// toxiproxy and its server.
//
// A black hole drops bytes rather than buffering them: a COMMIT held in a
// buffer and delivered after the client gave up would commit at an instant
// the harness cannot bound. The connections that lost bytes are reset when
// the black hole ends (their protocol streams are torn anyway), as a
// partition's connections eventually die.
type proxy struct {
	ln       net.Listener
	upstream string

	mu       sync.Mutex
	conns    map[*pconn]struct{}
	black    bool
	blackCh  chan struct{} // closed when the black hole ends
	latency  time.Duration
	closed   bool
	accepted int64
}

type pconn struct {
	client, server net.Conn
	once           sync.Once
	dropped        bool // bytes were dropped by a black hole (guarded by proxy.mu)
}

func (c *pconn) close(rst bool) {
	c.once.Do(func() {
		for _, n := range []net.Conn{c.client, c.server} {
			if n == nil {
				continue
			}
			if t, ok := n.(*net.TCPConn); ok && rst {
				_ = t.SetLinger(0) // close with RST, like a dropped connection
			}
			n.Close()
		}
	})
}

func newProxy(upstream string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, upstream: upstream, conns: map[*pconn]struct{}{}}
	go p.serve()
	return p, nil
}

// Addr is host:port of the proxy's listener.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *proxy) handle(client net.Conn) {
	// A new connection during a black hole hangs until it ends, like a SYN
	// into a partition; the client's own timeout gives up first.
	p.mu.Lock()
	for p.black {
		ch := p.blackCh
		p.mu.Unlock()
		<-ch
		p.mu.Lock()
	}
	closed := p.closed
	p.mu.Unlock()
	if closed {
		client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	c := &pconn{client: client, server: server}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close(true)
		return
	}
	p.conns[c] = struct{}{}
	p.accepted++
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.pipe(c, server, client); done <- struct{}{} }()
	go func() { p.pipe(c, client, server); done <- struct{}{} }()
	<-done
	c.close(false)
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// pipe copies src to dst chunk by chunk, applying the current fault.
func (p *proxy) pipe(c *pconn, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			black, lat := p.black, p.latency
			if black {
				c.dropped = true
			}
			p.mu.Unlock()
			if !black {
				if lat > 0 {
					time.Sleep(lat)
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.close(true)
			}
			return
		}
	}
}

// Reset closes every connection with a TCP reset.
func (p *proxy) Reset() int {
	p.mu.Lock()
	cs := make([]*pconn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.close(true)
	}
	return len(cs)
}

// BlackHole drops all traffic until Heal or Unblack.
func (p *proxy) BlackHole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.black {
		p.black = true
		p.blackCh = make(chan struct{})
	}
}

// Unblack ends a black hole and resets the connections that lost bytes.
func (p *proxy) Unblack() {
	p.mu.Lock()
	if !p.black {
		p.mu.Unlock()
		return
	}
	p.black = false
	close(p.blackCh)
	var torn []*pconn
	for c := range p.conns {
		if c.dropped {
			torn = append(torn, c)
		}
	}
	p.mu.Unlock()
	for _, c := range torn {
		c.close(true)
	}
}

// SetLatency delays every chunk in both directions by d.
func (p *proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Heal ends every fault.
func (p *proxy) Heal() {
	p.SetLatency(0)
	p.Unblack()
}

func (p *proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Heal()
	p.ln.Close()
	p.Reset()
}
