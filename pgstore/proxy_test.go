package pgstore_test

import (
	"net"
	"net/url"
	"sync"
	"testing"
)

// proxy forwards TCP connections on 127.0.0.1 to the test server, and can
// cut them: what a client sees when the server fails over or the network
// between them breaks. It can also hold their traffic and deliver it
// later, as a stalled network path does.
type proxy struct {
	ln     net.Listener
	target string

	// mu guards down, conns and gate.
	mu    sync.Mutex
	down  bool                  // refuse new connections
	conns map[net.Conn]struct{} // both ends of every open connection
	gate  chan struct{}         // while held: closed by release
	wg    sync.WaitGroup
}

// newProxy starts a proxy to the test server and returns it with a URL
// that connects through it. It is stopped when the test ends.
func newProxy(t testing.TB) (*proxy, string) {
	t.Helper()
	u, err := url.Parse(needServer(t))
	if err != nil {
		t.Skipf("IDEM_POSTGRES_URL is not a URL (%v); the proxy tests need one", err)
	}
	if u.Port() == "" || u.Hostname() == "" {
		t.Skip("IDEM_POSTGRES_URL has no TCP host and port; the proxy tests need one")
	}
	p := startProxy(t, u.Host)
	u.Host = p.ln.Addr().String()
	return p, u.String()
}

// startProxy starts a proxy to target (host:port) on a free port of
// 127.0.0.1. It is stopped when the test ends.
func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.release()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

// pipe copies src to dst, each chunk after the gate opens: a chunk read
// while the proxy holds waits, and is delivered on release even if src
// has closed meanwhile.
func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			if gate != nil {
				<-gate
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// cut closes every open connection and refuses new ones until restore.
func (p *proxy) cut() {
	p.mu.Lock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
}

// hold stops delivering traffic, both ways, until release: the kernel
// and the proxy buffer it, and senders block once their buffers fill.
func (p *proxy) hold() {
	p.mu.Lock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
	p.mu.Unlock()
}

// release delivers what hold kept back, and traffic flows again.
func (p *proxy) release() {
	p.mu.Lock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
	p.mu.Unlock()
}

// restore accepts connections again.
func (p *proxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}
