package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit/idem/pgstore/pgtest"
	"github.com/redis/go-redis/v9"
)

// Servers are the database servers the server-backed contenders use: the
// ones named in the environment, or throwaway ones the suite starts when
// their binaries are installed. A contender whose server is missing is
// reported as not run, with the reason.
type Servers struct {
	// PGURL is the PostgreSQL server's URL, empty when there is none;
	// PGSchema the schema this run's tables live in; PGNote says where the
	// server came from, or why there is none.
	PGURL, PGSchema, PGNote string
	// RedisAddr is the Redis server's host:port, empty when there is none;
	// RedisDir its directory when the suite started it (for the size of
	// its append-only file); RedisNote as PGNote.
	RedisAddr, RedisDir, RedisNote string
	// RedisManaged is true when the suite started the server and may
	// change its configuration (appendfsync) between contenders.
	RedisManaged bool

	stops []func()
}

// Environment variables that name servers. The IDEM_BENCH_ ones pass the
// parent's servers to the child processes.
const (
	envPostgresURL = "IDEM_POSTGRES_URL"
	envRedisURL    = "IDEM_REDIS_URL"
	envChildPG     = "IDEM_BENCH_PG_URL"
	envChildSchema = "IDEM_BENCH_PG_SCHEMA"
	envChildRedis  = "IDEM_BENCH_REDIS_ADDR"
	envChildRDir   = "IDEM_BENCH_REDIS_DIR"
	envChildRMgd   = "IDEM_BENCH_REDIS_MANAGED"
)

// startServers finds or starts the servers. logf reports progress.
func startServers(ctx context.Context, logf func(string, ...any)) *Servers {
	s := &Servers{}
	if url := os.Getenv(envPostgresURL); url != "" {
		s.PGURL, s.PGNote = url, "the server at $"+envPostgresURL
	} else if url, stop, err := startPostgres(ctx); err != nil {
		s.PGNote = "not run: " + err.Error()
	} else {
		s.PGURL, s.PGNote = url, "a throwaway cluster the suite started (initdb; default settings: fsync=on, synchronous_commit=on)"
		s.stops = append(s.stops, stop)
	}
	if s.PGURL != "" {
		schema, err := pgtest.CreateSchema(ctx, s.PGURL, "idem_bench_")
		if err != nil {
			s.PGURL, s.PGNote = "", fmt.Sprintf("not run: cannot use the server: %v", err)
		} else {
			s.PGSchema = schema
			url := s.PGURL
			s.stops = append([]func(){func() { pgtest.DropSchema(url, schema) }}, s.stops...)
		}
	}
	logf("postgres: %s", s.PGNote)

	if url := os.Getenv(envRedisURL); url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			s.RedisNote = "not run: $" + envRedisURL + ": " + err.Error()
		} else {
			s.RedisAddr, s.RedisNote = opt.Addr, "the server at $"+envRedisURL+" (its configuration as found)"
		}
	} else if addr, dir, stop, err := startRedis(ctx); err != nil {
		s.RedisNote = "not run: " + err.Error()
	} else {
		s.RedisAddr, s.RedisDir, s.RedisManaged = addr, dir, true
		s.RedisNote = "a throwaway redis-server the suite started (appendonly yes, no automatic AOF rewrite, no RDB snapshots)"
		s.stops = append(s.stops, stop)
	}
	logf("redis: %s", s.RedisNote)
	return s
}

// childServers returns the servers a parent process passed down.
func childServers() *Servers {
	return &Servers{
		PGURL: os.Getenv(envChildPG), PGSchema: os.Getenv(envChildSchema),
		RedisAddr: os.Getenv(envChildRedis), RedisDir: os.Getenv(envChildRDir),
		RedisManaged: os.Getenv(envChildRMgd) == "1",
	}
}

// env returns the environment that passes the servers to a child.
func (s *Servers) env() []string {
	mgd := "0"
	if s.RedisManaged {
		mgd = "1"
	}
	return []string{envChildPG + "=" + s.PGURL, envChildSchema + "=" + s.PGSchema,
		envChildRedis + "=" + s.RedisAddr, envChildRDir + "=" + s.RedisDir, envChildRMgd + "=" + mgd}
}

// Stop stops what startServers started, newest first.
func (s *Servers) Stop() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
	s.stops = nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startPostgres starts a throwaway cluster (see pgtest) with PostgreSQL's
// default durability; max_connections is raised for the concurrent
// contenders.
func startPostgres(ctx context.Context) (url string, stop func(), err error) {
	c, err := pgtest.Start(ctx, &pgtest.Options{
		DirPrefix: "idem-bench-pg-",
		Settings:  []string{"max_connections=200"},
	})
	if errors.Is(err, pgtest.ErrNoBinaries) {
		return "", nil, errors.New("no PostgreSQL server binaries (initdb, postgres) and no $" + envPostgresURL)
	}
	if err != nil {
		return "", nil, err
	}
	return c.URL, c.Stop, nil
}

func lastLines(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], " / ")
}

// startRedis starts redis-server on a free port of 127.0.0.1 in a
// temporary directory, with the append-only file on and RDB snapshots off.
// The contenders set appendfsync themselves.
func startRedis(ctx context.Context) (addr, dir string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", "", nil, errors.New("no redis-server binary on PATH and no $" + envRedisURL +
			" (apt-get install redis-server to measure it)")
	}
	dir, err = os.MkdirTemp("", "idem-bench-redis-")
	if err != nil {
		return "", "", nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return "", "", nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--appendonly", "yes", "--appendfsync", "always", "--auto-aof-rewrite-percentage", "0", "--save", "", "--daemonize", "no",
		"--logfile", filepath.Join(dir, "redis.log"))
	// Pdeathsig stops the server if the suite dies without stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", "", nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		os.RemoveAll(dir)
	}
	addr = "127.0.0.1:" + strconv.Itoa(port)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := rdb.Ping(ctx).Err(); err == nil {
			return addr, dir, stop, nil
		} else if time.Now().After(deadline) {
			stop()
			return "", "", nil, fmt.Errorf("redis-server did not answer: %w", err)
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			stop()
			return "", "", nil, fmt.Errorf("redis-server exited: %s", lastLines(log))
		case <-time.After(50 * time.Millisecond):
		}
	}
}
