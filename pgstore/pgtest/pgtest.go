//go:build unix

// Package pgtest starts throwaway PostgreSQL clusters for tests and
// benchmarks, as net/http/httptest starts HTTP servers.
//
// Start runs initdb in a temporary directory and starts postgres on a free
// port of 127.0.0.1, trusting local connections as the postgres user; Stop
// shuts it down and removes the directory. It needs PostgreSQL's server
// binaries: the newest /usr/lib/postgresql/VERSION/bin (Debian's
// postgresql package), or initdb and postgres on PATH. Without them Start
// returns an error wrapping ErrNoBinaries, so that a caller can skip.
//
// initdb and postgres refuse to run as root: as root both run as the
// postgres user, which then owns the cluster's directory under /tmp. The
// server is the caller's child process, not a daemon, and on Linux it is
// stopped if the caller dies without stopping it (a timeout's SIGKILL), so
// that no cluster outlives its run.
package pgtest

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
	"sync"
	"syscall"
	"time"

	"github.com/idemkit/idem/internal/serverproc"
	"github.com/jackc/pgx/v5"
)

// ErrNoBinaries is wrapped by Start's error when PostgreSQL's server
// binaries are not installed.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries (initdb, postgres) in /usr/lib/postgresql/*/bin or on PATH")

// Options configure a cluster. The zero value is a cluster with
// PostgreSQL's default settings.
type Options struct {
	// Settings are server settings, each "name=value", passed to postgres
	// as -c options after listen_addresses and unix_socket_directories.
	Settings []string
	// NoSync runs initdb with --no-sync: faster, and safe when the cluster
	// is thrown away with the machine's crash anyway.
	NoSync bool
	// DirPrefix names the temporary directory; "pgtest-" if empty.
	DirPrefix string
	// Upstream is the host:port a standby made by StartStandby copies and
	// streams its WAL from, in place of the primary's own address: a proxy
	// in front of the primary, which delays or cuts the replication
	// traffic. Start ignores it.
	Upstream string
}

// Cluster is a running throwaway cluster.
type Cluster struct {
	// URL is a connection URL to the postgres database as the postgres
	// superuser, over TCP on 127.0.0.1 without TLS.
	URL string
	// Addr is the server's host and port, "127.0.0.1:PORT", for
	// connection strings that name several hosts.
	Addr string
	// Dir is the cluster's directory: the data directory (Dir/data), the
	// server's log and its Unix socket. Stop removes it.
	Dir string

	stopOnce sync.Once
	srv      serverArgs
	// mu guards proc: the running server, nil after Crash until Restart.
	mu   sync.Mutex
	proc *server
}

// Stop shuts the server down (PostgreSQL's fast shutdown, then SIGKILL if
// it has not exited within 30 seconds) and removes its directory. It may
// be called more than once.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		if c.proc != nil {
			c.proc.stop(syscall.SIGINT)
			c.proc = nil
		}
		c.mu.Unlock()
		_ = os.RemoveAll(c.Dir)
	})
}

// Crash stops the server as `pg_ctl stop -m immediate` does: SIGQUIT to
// the postmaster, which ends every session at once and exits without a
// checkpoint, so the next start runs crash recovery. If the server has
// not exited within 5 seconds, every process of it is killed (SIGKILL),
// and Crash reports true. It returns once the server has exited; without
// a running server it does nothing.
func (c *Cluster) Crash() (killed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return false
	}
	_ = c.proc.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-c.proc.exited:
	case <-time.After(5 * time.Second):
		// The server runs in a process group of its own (serverAttr).
		_ = syscall.Kill(-c.proc.cmd.Process.Pid, syscall.SIGKILL)
		<-c.proc.exited
		killed = true
	}
	c.proc = nil
	return killed
}

// Restart starts the server again after Crash, on the same data
// directory and port (URL stays valid), and returns once it accepts
// connections. With a running server it does nothing.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		return nil
	}
	p, err := startServer(ctx, c.srv)
	if err != nil {
		return err
	}
	c.proc = p
	return nil
}

// Kill ends every process of the server at once with SIGKILL, as a
// machine that dies takes them: no shutdown, no last WAL sent to a
// standby. It returns once the postmaster has exited; without a running
// server it does nothing. Restart starts it again (crash recovery).
func (c *Cluster) Kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return
	}
	// The server runs in a process group of its own (serverAttr).
	_ = syscall.Kill(-c.proc.cmd.Process.Pid, syscall.SIGKILL)
	<-c.proc.exited
	c.proc = nil
}

// Promote makes a standby a primary (pg_promote) and returns once it
// accepts writes. It returns an error from a server that is not a standby.
func (c *Cluster) Promote(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil {
		return fmt.Errorf("pg_promote: %w", err)
	}
	if !ok {
		return errors.New("pg_promote: the standby was not promoted within 60 seconds")
	}
	return nil
}

// Start creates and starts a cluster. ctx bounds initdb and the wait for
// the server to accept connections, not the server's life: Stop ends it.
func Start(ctx context.Context, opts *Options) (*Cluster, error) {
	o, bin, cred, dir, err := prepare(opts)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	args := []string{"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"}
	if o.NoSync {
		args = append(args, "--no-sync")
	}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), args...)
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, serverproc.LastLines(out))
	}
	return launch(ctx, serverArgs{bin: bin, dir: dir, data: data, cred: cred, settings: o.Settings})
}

// StartStandby makes a streaming standby of c and starts it: pg_basebackup
// copies c's data directory over the replication protocol (its WAL
// streamed, -X stream) and writes standby.signal and primary_conninfo
// (-R), so the new server follows c and accepts read-only connections.
// opts.Settings are the standby's own; its cluster_name is "standby" unless
// they set one, so that c's synchronous_standby_names may name it. c must
// allow replication connections from 127.0.0.1 (initdb's default
// pg_hba.conf does, with Start's trust).
func (c *Cluster) StartStandby(ctx context.Context, opts *Options) (*Cluster, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.DirPrefix == "" {
		o.DirPrefix = "pgtest-standby-"
	}
	o, bin, cred, dir, err := prepare(&o)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	host, port := "127.0.0.1", strconv.Itoa(c.srv.port)
	if o.Upstream != "" {
		if host, port, err = net.SplitHostPort(o.Upstream); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: Upstream %q: %w", o.Upstream, err)
		}
	}
	args := []string{"-D", data, "-h", host, "-p", port, "-U", "postgres",
		"-X", "stream", "-R", "-c", "fast"}
	if o.NoSync {
		args = append(args, "--no-sync")
	}
	bb := exec.CommandContext(ctx, filepath.Join(bin, "pg_basebackup"), args...)
	bb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := bb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pg_basebackup: %v: %s", err, serverproc.LastLines(out))
	}
	settings := append([]string{"cluster_name=standby"}, o.Settings...)
	return launch(ctx, serverArgs{bin: bin, dir: dir, data: data, cred: cred, settings: settings})
}

// prepare fills opts' defaults, finds the binaries and makes the cluster's
// directory, owned by the user the server runs as (cred: the postgres
// user when the caller is root, nil otherwise).
func prepare(opts *Options) (o Options, bin string, cred *syscall.Credential, dir string, err error) {
	if opts != nil {
		o = *opts
	}
	if o.DirPrefix == "" {
		o.DirPrefix = "pgtest-"
	}
	if bin, err = Binaries(); err != nil {
		return o, "", nil, "", err
	}
	base := ""
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return o, "", nil, "", fmt.Errorf("running as root, and there is no postgres user to run the server as: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		base = "/tmp" // every parent must be searchable by the postgres user
	}
	if dir, err = os.MkdirTemp(base, o.DirPrefix); err != nil {
		return o, "", nil, "", err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return o, "", nil, "", err
		}
	}
	return o, bin, cred, dir, nil
}

// launch starts the server of a with a free port and returns its Cluster,
// or removes a.dir and returns the error.
func launch(ctx context.Context, a serverArgs) (*Cluster, error) {
	// A port taken between the probe and the server's bind makes the start
	// fail: try a few.
	var lastErr error
	for range 5 {
		port, err := serverproc.FreePort()
		if err != nil {
			_ = os.RemoveAll(a.dir)
			return nil, err
		}
		a.port = port
		p, err := startServer(ctx, a)
		if err == nil {
			return &Cluster{URL: a.url(), Addr: a.addr(), Dir: a.dir, srv: a, proc: p}, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	_ = os.RemoveAll(a.dir)
	return nil, lastErr
}

// serverArgs are what starts a cluster's server, again after a Crash.
type serverArgs struct {
	bin, dir, data string
	port           int
	cred           *syscall.Credential
	settings       []string
}

func (a serverArgs) url() string {
	return "postgres://postgres@" + a.addr() + "/postgres?sslmode=disable"
}

func (a serverArgs) addr() string { return "127.0.0.1:" + strconv.Itoa(a.port) }

// server is a running postmaster.
type server struct {
	cmd    *exec.Cmd
	exited chan error // receives Wait's error once
}

// stop sends sig (SIGINT: fast shutdown; SIGQUIT: immediate), then SIGKILL
// if the server has not exited within 30 seconds, and waits for it.
func (p *server) stop(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func startServer(ctx context.Context, a serverArgs) (*server, error) {
	logPath := filepath.Join(a.dir, fmt.Sprintf("postgres-%d.log", a.port))
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	args := []string{"-D", a.data, "-p", strconv.Itoa(a.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + a.dir}
	for _, s := range a.settings {
		args = append(args, "-c", s)
	}
	cmd := exec.Command(filepath.Join(a.bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = serverAttr(a.cred)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	p := &server{cmd: cmd, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	url := a.url()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-p.exited:
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("postgres exited (%v): %s", err, serverproc.LastLines(log))
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, url)
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			return p, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop(syscall.SIGINT)
			return nil, fmt.Errorf("postgres did not accept connections: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Binaries returns the directory holding initdb and postgres: the newest
// /usr/lib/postgresql/*/bin, or the one on PATH. Its error wraps
// ErrNoBinaries when there is none.
func Binaries() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
		if r, err := filepath.EvalSymlinks(p); err == nil {
			dirs = append(dirs, filepath.Dir(r))
		}
	}
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// CreateSchema makes a fresh schema named prefix plus a random suffix on the
// server at url and returns its name, so that a run's tables never meet
// another run's on a shared server. Drop it with DropSchema.
func CreateSchema(ctx context.Context, url, prefix string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var id [4]byte
	_, _ = rand.Read(id[:])
	schema := prefix + hex.EncodeToString(id[:])
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	return schema, err
}

// DropSchema drops schema and everything in it, best effort: a server that
// is already gone leaves nothing to drop.
func DropSchema(url, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
}
