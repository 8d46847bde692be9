//go:build unix

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
	"time"

	"github.com/idemkit/idem/internal/serverproc"
	"github.com/redis/go-redis/v9"
)

// MasterName is the name a Group's Sentinels monitor its primary under.
const MasterName = "idem"

// Group is a running throwaway replication group: a primary, its
// replicas and the Sentinels that fail over between them.
type Group struct {
	// Servers are the group's redis-servers: Servers[0] was the primary
	// when the group started; Primary says which one is now.
	Servers []*Server
	// Sentinels are the group's redis-sentinel processes.
	Sentinels []*Server
}

// GroupOptions configure a Group. The zero value is one replica, three
// Sentinels with a quorum of two, and a primary judged down after one
// second without an answer.
type GroupOptions struct {
	// Replicas is the number of replicas. Default 1.
	Replicas int
	// Sentinels is the number of Sentinels; the quorum is a majority.
	// Default 3.
	Sentinels int
	// DownAfter is Sentinel's down-after-milliseconds. Default 1 second.
	DownAfter time.Duration
	// Server configures every redis-server of the group.
	Server *Options
}

// StartGroup starts a primary, its replicas and Sentinels, and returns
// once every replica is in sync and every Sentinel knows every replica
// and every other Sentinel.
func StartGroup(ctx context.Context, opts *GroupOptions) (*Group, error) {
	var o GroupOptions
	if opts != nil {
		o = *opts
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Sentinels <= 0 {
		o.Sentinels = 3
	}
	if o.DownAfter <= 0 {
		o.DownAfter = time.Second
	}
	g := &Group{}
	for i := range 1 + o.Replicas {
		s, err := Start(ctx, o.Server)
		if err != nil {
			g.Stop()
			return nil, err
		}
		g.Servers = append(g.Servers, s)
		if i > 0 {
			c := s.Client()
			host, port, _ := strings.Cut(g.Servers[0].Addr, ":")
			err = c.ReplicaOf(ctx, host, port).Err()
			_ = c.Close()
			if err != nil {
				g.Stop()
				return nil, err
			}
		}
	}
	for _, s := range g.Servers[1:] {
		if err := waitInfo(ctx, s.Addr, "replication", "master_link_status:up"); err != nil {
			g.Stop()
			return nil, err
		}
	}
	for range o.Sentinels {
		s, err := startSentinel(ctx, g.Servers[0].Addr, o.Sentinels/2+1, o.DownAfter)
		if err != nil {
			g.Stop()
			return nil, err
		}
		g.Sentinels = append(g.Sentinels, s)
	}
	for _, s := range g.Sentinels {
		want := fmt.Sprintf("slaves=%d,sentinels=%d", o.Replicas, o.Sentinels)
		if err := waitInfo(ctx, s.Addr, "sentinel", want); err != nil {
			g.Stop()
			return nil, err
		}
	}
	return g, nil
}

// startSentinel starts a Sentinel monitoring the primary at addr.
func startSentinel(ctx context.Context, addr string, quorum int, downAfter time.Duration) (*Server, error) {
	dir, err := os.MkdirTemp("", "redistest-sentinel-")
	if err != nil {
		return nil, err
	}
	port, err := serverproc.FreePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	host, pport, _ := strings.Cut(addr, ":")
	conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile sentinel.log\n"+
		"sentinel monitor %s %s %s %d\n"+
		"sentinel down-after-milliseconds %s %d\n"+
		"sentinel failover-timeout %s 10000\n"+
		"sentinel parallel-syncs %s 1\n",
		port, dir, MasterName, host, pport, quorum, MasterName, downAfter.Milliseconds(), MasterName, MasterName)
	path := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	bin, err := findSentinel()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir, args: []string{bin, path, "--sentinel"}}
	if s.proc, err = s.start(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// findSentinel returns redis-sentinel, or redis-server (which runs as a
// Sentinel with --sentinel) when only it is installed.
func findSentinel() (string, error) {
	for _, name := range []string{"redis-sentinel", "redis-server"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoBinary
}

// waitInfo waits until the INFO section of the server at addr holds want.
func waitInfo(ctx context.Context, addr, section, want string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	var info string
	for {
		var err error
		info, err = c.Info(ctx, section).Result()
		if err == nil && strings.Contains(info, want) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: %q not in INFO %s: %v %q", addr, want, section, err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SentinelAddrs returns the Sentinels' addresses.
func (g *Group) SentinelAddrs() []string {
	var out []string
	for _, s := range g.Sentinels {
		out = append(out, s.Addr)
	}
	return out
}

// FailoverClient returns a new client that finds the primary through the
// Sentinels; the caller closes it.
func (g *Group) FailoverClient() *redis.Client {
	return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: g.SentinelAddrs()})
}

// Primary returns the server the Sentinels name as the primary.
func (g *Group) Primary(ctx context.Context) (*Server, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: g.Sentinels[0].Addr})
	defer c.Close()
	addr, err := c.GetMasterAddrByName(ctx, MasterName).Result()
	if err != nil {
		return nil, err
	}
	for _, s := range g.Servers {
		if s.Addr == addr[0]+":"+addr[1] {
			return s, nil
		}
	}
	return nil, fmt.Errorf("sentinel names %v, no server of the group", addr)
}

// WaitFailover waits until every Sentinel names a primary other than
// old, and that server answers as a primary.
func (g *Group) WaitFailover(ctx context.Context, old *Server, timeout time.Duration) (*Server, error) {
	deadline := time.Now().Add(timeout)
	for {
		var now *Server
		agreed := true
		for _, sn := range g.Sentinels {
			c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
			addr, err := c.GetMasterAddrByName(ctx, MasterName).Result()
			_ = c.Close()
			if err != nil || addr[0]+":"+addr[1] == old.Addr {
				agreed = false
				break
			}
			for _, s := range g.Servers {
				if s.Addr == addr[0]+":"+addr[1] {
					now = s
				}
			}
		}
		if agreed && now != nil && waitInfo(ctx, now.Addr, "replication", "role:master") == nil {
			return now, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, errors.New("no failover within " + timeout.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitSynced waits until the server the Sentinels name as the primary
// has every other server of the group as a replica online (after a
// restart, once the Sentinels made the restarted server a replica and it
// has synchronised), and returns that primary.
func (g *Group) WaitSynced(ctx context.Context) (*Server, error) {
	want := fmt.Sprintf("connected_slaves:%d\r", len(g.Servers)-1)
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, err := g.Primary(ctx)
		if err == nil {
			c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1})
			info, err2 := c.Info(ctx, "replication").Result()
			_ = c.Close()
			if err2 == nil && strings.Contains(info, "role:master") && strings.Contains(info, want) &&
				strings.Count(info, "state=online") == len(g.Servers)-1 {
				return p, nil
			}
			err = fmt.Errorf("%v %q", err2, info)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("the group did not synchronise: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops every Sentinel and server and removes their directories.
func (g *Group) Stop() {
	for _, s := range g.Sentinels {
		s.Stop()
	}
	for _, s := range g.Servers {
		s.Stop()
	}
}
