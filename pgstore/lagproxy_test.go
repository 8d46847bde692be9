package pgstore_test

import (
	"net"
	"sync"
	"testing"
	"time"
)

// lagProxy forwards TCP connections to target, delaying what target sends
// by a fixed time: a replication link whose standby runs behind by that
// much. Cut drops the connections and whatever they still hold, as the
// death of the primary's machine loses the WAL it had not yet put on the
// wire.
type lagProxy struct {
	ln     net.Listener
	target string
	lag    time.Duration

	mu    sync.Mutex // guards conns and cut
	conns []net.Conn
	cut   bool
}

func startLagProxy(t testing.TB, target string, lag time.Duration) *lagProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lagProxy{ln: ln, target: target, lag: lag}
	go p.accept()
	t.Cleanup(p.Cut)
	return p
}

// Addr is the proxy's host:port.
func (p *lagProxy) Addr() string { return p.ln.Addr().String() }

// Cut closes the listener and every connection, dropping what is in flight.
func (p *lagProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	_ = p.ln.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

func (p *lagProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			return
		}
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		go p.forward(server, client, 0)
		go p.forward(client, server, p.lag)
	}
}

// forward copies src to dst, each chunk lag after it was read, in order.
func (p *lagProxy) forward(dst, src net.Conn, lag time.Duration) {
	type chunk struct {
		at time.Time
		b  []byte
	}
	queue := make(chan chunk, 4096)
	go func() {
		defer dst.Close()
		for c := range queue {
			time.Sleep(time.Until(c.at))
			p.mu.Lock()
			cut := p.cut
			p.mu.Unlock()
			if cut {
				return
			}
			if _, err := dst.Write(c.b); err != nil {
				return
			}
		}
	}()
	defer close(queue)
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			queue <- chunk{at: time.Now().Add(lag), b: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			return
		}
	}
}
