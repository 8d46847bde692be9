package pgstore_test

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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The tests run against a real PostgreSQL server, never a mock. They take
// it from IDEM_POSTGRES_URL, or start a throwaway cluster of their own when
// PostgreSQL's binaries are installed (Debian's postgresql package: initdb
// and postgres under /usr/lib/postgresql/VERSION/bin, or on PATH). Without
// either they skip, unless IDEM_REQUIRE_POSTGRES=1 (CI) makes them fail.
const (
	envURL     = "IDEM_POSTGRES_URL"
	envRequire = "IDEM_REQUIRE_POSTGRES"
	envHelper  = "IDEM_PGSTORE_HELPER" // set in child processes: what to do
)

// server is the test binary's database: its URL, or why there is none.
var server struct {
	url    string
	schema string // this run's schema: every test's tables live in it
	err    error
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Getenv(envHelper) != "" {
		// A child process: the parent passed its URL and schema.
		server.url = os.Getenv(envURL)
		server.schema = os.Getenv("IDEM_PGSTORE_SCHEMA")
		return m.Run()
	}
	var stop func()
	server.url = os.Getenv(envURL)
	if server.url == "" {
		var err error
		server.url, stop, err = startCluster()
		if err != nil {
			server.err = err
		}
	}
	if server.err == nil {
		var err error
		server.schema, err = createRunSchema(server.url)
		if err != nil {
			server.err = fmt.Errorf("cannot use the server at %s: %w", redact(server.url), err)
		}
	}
	code := m.Run()
	if p := sharedPool.Load(); p != nil {
		p.Close()
	}
	if server.err == nil && os.Getenv(envURL) != "" {
		dropRunSchema(server.url, server.schema)
	}
	if stop != nil {
		stop()
	}
	return code
}

// needServer skips the test (or fails it under IDEM_REQUIRE_POSTGRES=1)
// when there is no server, and returns its URL.
func needServer(tb testing.TB) string {
	tb.Helper()
	if server.err != nil {
		msg := fmt.Sprintf("no PostgreSQL server: %v. Set %s=postgres://... to use a server, "+
			"or install PostgreSQL (apt-get install postgresql) so that the tests start their own",
			server.err, envURL)
		if os.Getenv(envRequire) == "1" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return server.url
}

// newPool returns a pool on the test server, closed when the test ends.
func newPool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(needServer(tb))
	if err != nil {
		tb.Fatal(err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

var tableSeq atomic.Int64

// uniqueTable returns a table name no other test of this run uses.
func uniqueTable(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), tableSeq.Add(1))
}

// newBackend returns a Backend on a fresh table of this run's schema. The
// caller (or the Store it is given to) closes it.
func newBackend(tb testing.TB, pool *pgxpool.Pool, opts *pgstore.Options) *pgstore.Backend {
	tb.Helper()
	o := pgstore.Options{}
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = server.schema
	}
	if o.Table == "" {
		o.Table = uniqueTable("t")
	}
	b, err := pgstore.New(context.Background(), pool, &o)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// sharedPool is one pool for the tests that need no pool of their own; it
// lives as long as the test binary.
var sharedPool atomic.Pointer[pgxpool.Pool]

func pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	needServer(tb)
	if p := sharedPool.Load(); p != nil {
		return p
	}
	cfg, err := pgxpool.ParseConfig(server.url)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 16
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if !sharedPool.CompareAndSwap(nil, p) {
		p.Close()
	}
	return sharedPool.Load()
}

func createRunSchema(url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var id [4]byte
	_, _ = rand.Read(id[:])
	schema := "idem_test_" + hex.EncodeToString(id[:])
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	return schema, err
}

func dropRunSchema(url, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
}

func redact(url string) string {
	if i := strings.Index(url, "@"); i >= 0 {
		if j := strings.Index(url, "://"); j >= 0 && j < i {
			return url[:j+3] + "...@" + url[i+1:]
		}
	}
	return url
}

// startCluster creates and starts a throwaway cluster in a temporary
// directory, listening on a free port of 127.0.0.1, and returns its URL and
// a function that stops it and removes the directory.
//
// initdb and postgres refuse to run as root, and CI runs as root: then both
// run as the postgres user, which owns the directory.
func startCluster() (url string, stop func(), err error) {
	bin, err := findBinaries()
	if err != nil {
		return "", nil, err
	}
	var cred *syscall.Credential
	base := ""
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return "", nil, fmt.Errorf("running as root, and there is no postgres user to run the server as: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		base = "/tmp" // every parent must be searchable by the postgres user
	}
	dir, err := os.MkdirTemp(base, "pgstore-test-")
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
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("initdb: %v: %s", err, out)
	}

	// A port taken between the probe and the server's bind makes the start
	// fail: try a few.
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			cleanup()
			return "", nil, err
		}
		url, stop, err := startServer(bin, dir, data, port, cred)
		if err == nil {
			return url, func() { stop(); cleanup() }, nil
		}
		lastErr = err
	}
	cleanup()
	return "", nil, lastErr
}

func startServer(bin, dir, data string, port int, cred *syscall.Credential) (string, func(), error) {
	logPath := filepath.Join(dir, fmt.Sprintf("postgres-%d.log", port))
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", nil, err
	}
	defer logFile.Close()
	// fsync is off: the tests kill clients, never the server, and the
	// benchmarks compare the backend with bare pgx on the same server.
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+dir,
		"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=300",
		"-c", "shared_buffers=128MB", "-c", "log_min_messages=warning")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Pdeathsig stops the server if the test binary dies without stopping
	// it (a timeout's SIGKILL), so no cluster outlives its test run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		// SIGINT is PostgreSQL's fast shutdown: end sessions, checkpoint, exit.
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(logPath)
			return "", nil, fmt.Errorf("postgres exited (%v): %s", err, log)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, url)
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			return url, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("postgres did not accept connections within a minute: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// findBinaries returns the directory holding initdb and postgres: the
// newest /usr/lib/postgresql/*/bin, or the one on PATH.
func findBinaries() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		d := filepath.Dir(p)
		if isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, postgres) in /usr/lib/postgresql/*/bin or on PATH")
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// newStore wraps b in a Store, closed when the test ends.
func newStore(tb testing.TB, b idem.Backend, o *idem.Options) *idem.Store {
	tb.Helper()
	s := idem.New(b, o)
	tb.Cleanup(func() { _ = s.Close() })
	return s
}
