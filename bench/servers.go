package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
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
		schema, err := createSchema(ctx, s.PGURL)
		if err != nil {
			s.PGURL, s.PGNote = "", fmt.Sprintf("not run: cannot use the server: %v", err)
		} else {
			s.PGSchema = schema
			url := s.PGURL
			s.stops = append([]func(){func() { dropSchema(url, schema) }}, s.stops...)
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

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startPostgres creates a cluster in a temporary directory with initdb
// and starts postgres on a free port of 127.0.0.1 with PostgreSQL's
// default durability. initdb and postgres refuse to run as root: as root
// both run as the postgres user. The server is the suite's child, not a
// daemon (pg_ctl's way), so that Pdeathsig stops it if the suite is killed.
func startPostgres(ctx context.Context) (url string, stop func(), err error) {
	bin, err := postgresBin()
	if err != nil {
		return "", nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return "", nil, fmt.Errorf("running as root and there is no postgres user to run the server as: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Under /tmp: every parent directory must be searchable by postgres.
	dir, err := os.MkdirTemp("/tmp", "idem-bench-pg-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			cleanup()
			return "", nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("initdb: %v: %s", err, lastLines(out))
	}
	port, err := freePort()
	if err != nil {
		cleanup()
		return "", nil, err
	}
	logPath := filepath.Join(dir, "log")
	logFile, err := os.Create(logPath)
	if err != nil {
		cleanup()
		return "", nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+dir, "-c", "max_connections=200")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop = func() {
		// SIGINT is PostgreSQL's fast shutdown: end sessions, checkpoint, exit.
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		cleanup()
	}
	url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			cleanup()
			return "", nil, fmt.Errorf("postgres exited: %s", lastLines(log))
		case <-time.After(50 * time.Millisecond):
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, url)
		cancel()
		if err == nil {
			_ = conn.Close(ctx)
			return url, stop, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return "", nil, fmt.Errorf("postgres did not accept connections: %w", err)
		}
	}
}

// postgresBin returns the directory of initdb and postgres: the
// newest /usr/lib/postgresql/*/bin, or the one on PATH.
func postgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	ver := func(d string) int { v, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return v }
	sort.Slice(dirs, func(i, j int) bool { return ver(dirs[i]) > ver(dirs[j]) })
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			dirs = append(dirs, filepath.Dir(r))
		}
	}
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, postgres) and no $" + envPostgresURL)
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

func lastLines(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], " / ")
}

// createSchema makes this run's schema, so that its tables never meet
// another run's on a shared server.
func createSchema(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	schema := "idem_bench_" + randomHex(4)
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	return schema, err
}

func dropSchema(url, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
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
