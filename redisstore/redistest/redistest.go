//go:build unix

// Package redistest starts throwaway redis-server processes for tests, as
// net/http/httptest starts HTTP servers.
//
// Start runs redis-server in a temporary directory on a free port of
// 127.0.0.1, with the append-only file on and the settings the caller
// asks for; Stop shuts it down and removes the directory. Kill and
// Restart crash it (SIGKILL) and start it again on the same directory and
// port, so that a test sees what the server recovers from its files.
// Without a redis-server on PATH, Start returns an error wrapping
// ErrNoBinary, so that a caller can skip.
//
// The server is the caller's child process, not a daemon, and on Linux it
// is killed if the caller dies without stopping it, so that no server
// outlives its run.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemkit/idem/internal/serverproc"
	"github.com/redis/go-redis/v9"
)

// ErrNoBinary is wrapped by Start's error when redis-server is not on PATH.
var ErrNoBinary = errors.New("no redis-server on PATH")

// Options configure a server. The zero value is a server with
// appendonly yes and appendfsync always: the settings idem's Durable
// mode asks for.
type Options struct {
	// Settings are server settings, each "name value" (for example
	// "appendfsync everysec"), passed after the defaults so they win.
	Settings []string
}

// Server is a running throwaway redis-server.
type Server struct {
	// Addr is the server's address, 127.0.0.1:port.
	Addr string
	// Dir is the server's directory: its append-only files and its log.
	// Stop removes it.
	Dir string

	args     []string
	stopOnce sync.Once
	// mu guards proc: the running server, nil after Kill until Restart.
	mu   sync.Mutex
	proc *proc
}

type proc struct {
	cmd    *exec.Cmd
	exited chan error // receives Wait's error once
}

// Start starts a server. ctx bounds the wait for it to answer PING, not
// the server's life: Stop ends it.
func Start(ctx context.Context, opts *Options) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoBinary, err)
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	port, err := serverproc.FreePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	args := []string{bin,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always",
		"--logfile", "redis.log", "--daemonize", "no"}
	if opts != nil {
		for _, s := range opts.Settings {
			name, value, _ := strings.Cut(s, " ")
			args = append(args, "--"+name, value)
		}
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir, args: args}
	if s.proc, err = s.start(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// URL returns the server's address as a redis:// URL of database 0.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Client returns a new client of the server; the caller closes it.
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr})
}

// Stop shuts the server down (SIGTERM, then SIGKILL after 10 seconds) and
// removes its directory. It may be called more than once.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		if s.proc != nil {
			s.proc.stop(syscall.SIGTERM)
			s.proc = nil
		}
		s.mu.Unlock()
		_ = os.RemoveAll(s.Dir)
	})
}

// Kill kills the server with SIGKILL, as a crash would, and returns once
// it has exited. Without a running server it does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.stop(syscall.SIGKILL)
		s.proc = nil
	}
}

// Restart starts the server again after Kill, on the same directory and
// port, and returns once it answers PING (it has loaded its append-only
// file). With a running server it does nothing.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return nil
	}
	p, err := s.start(ctx)
	if err != nil {
		return err
	}
	s.proc = p
	return nil
}

func (s *Server) start(ctx context.Context) (*proc, error) {
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Dir = s.Dir
	cmd.SysProcAttr = serverAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	p := &proc{cmd: cmd, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-p.exited:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			return nil, fmt.Errorf("redis-server exited (%v): %s", err, serverproc.LastLines(log))
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.Ping(cctx).Err()
		cancel()
		if err == nil {
			return p, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop(syscall.SIGKILL)
			return nil, fmt.Errorf("redis-server did not answer: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends sig, then SIGKILL if the server has not exited within 10
// seconds, and waits for it.
func (p *proc) stop(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Cluster is a running throwaway Redis Cluster of primaries without
// replicas.
type Cluster struct {
	// Nodes are its servers, each holding an equal range of the slots.
	Nodes []*Server
}

// StartCluster starts n servers with cluster mode on, gives each an equal
// range of the 16384 slots, joins them, and returns once every node sees
// the cluster as ok. opts' settings apply to every node.
func StartCluster(ctx context.Context, n int, opts *Options) (*Cluster, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Settings = append([]string{"cluster-enabled yes", "cluster-config-file nodes.conf"}, o.Settings...)
	c := &Cluster{}
	for range n {
		s, err := Start(ctx, &o)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	if err := c.join(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) join(ctx context.Context) error {
	const slots = 16384
	n := len(c.Nodes)
	for i, s := range c.Nodes {
		rc := s.Client()
		err := rc.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", i*slots/n, (i+1)*slots/n-1).Err()
		if err == nil && i > 0 {
			host, port, _ := strings.Cut(s.Addr, ":")
			err = c.Nodes[0].Client().ClusterMeet(ctx, host, port).Err()
		}
		_ = rc.Close()
		if err != nil {
			return fmt.Errorf("redis cluster: %w", err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range c.Nodes {
		rc := s.Client()
		for {
			info, err := rc.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d\r", n)) {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				_ = rc.Close()
				return fmt.Errorf("redis cluster did not come up: %v %q", err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = rc.Close()
	}
	return nil
}

// Client returns a new Cluster client of the cluster; the caller closes
// it.
func (c *Cluster) Client() *redis.ClusterClient {
	var addrs []string
	for _, s := range c.Nodes {
		addrs = append(addrs, s.Addr)
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
}

// Stop stops every node and removes their directories.
func (c *Cluster) Stop() {
	for _, s := range c.Nodes {
		s.Stop()
	}
}
