package pgstore_test

import (
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
)

// proxy forwards TCP connections on 127.0.0.1 to the test server, and can
// cut them: what a client sees when the server fails over or the network
// between them breaks.
type proxy struct {
	ln     net.Listener
	target string

	// mu guards down and conns.
	mu    sync.Mutex
	down  bool                  // refuse new connections
	conns map[net.Conn]struct{} // both ends of every open connection
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	return p, u.String()
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

func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
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

// restore accepts connections again.
func (p *proxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}
