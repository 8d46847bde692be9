package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The end-to-end test of idem proxy in front of a real Python tool server:
// examples/proxy-refunds' FastAPI refund server run by uvicorn, its example
// resolver, and its client, with the server and the proxy each SIGKILLed at
// the three points. It needs Debian's python3-fastapi and python3-uvicorn;
// without them it skips, unless requirePythonEnv is set (.ci/run sets it).

// requirePythonEnv makes the Python tests fail where they would skip.
const requirePythonEnv = "IDEM_REQUIRE_PYTHON"

// proxyChildEnv carries the arguments of idem proxy (separated by \x1f)
// to the test binary run as the proxy's process.
const proxyChildEnv = "IDEM_PROXY_CHILD"

// TestProxyCommand_Child is the body of the proxy's process when the test
// binary runs itself; it returns at once in any other process.
func TestProxyCommand_Child(t *testing.T) {
	env := os.Getenv(proxyChildEnv)
	if env == "" {
		return
	}
	os.Exit(run(context.Background(), strings.Split(env, "\x1f"), os.Stdout, os.Stderr))
}

// python returns the Python that has FastAPI and uvicorn, or skips.
func python(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(py); err == nil &&
			exec.Command(path, "-c", "import fastapi, uvicorn").Run() == nil {
			return path
		}
	}
	msg := "no python3 with fastapi and uvicorn: apt-get install python3-fastapi python3-uvicorn"
	if os.Getenv(requirePythonEnv) != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// child is a process the test kills and starts again.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it exited
	out  *lockedBuffer
}

// lockedBuffer collects a child's output for the failure message.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start starts cmd, with ln's socket as its fd 3 when ln is not nil, and
// kills it when the test ends.
func start(t *testing.T, cmd *exec.Cmd, ln *net.TCPListener) *child {
	t.Helper()
	c := &child{cmd: cmd, done: make(chan struct{}), out: &lockedBuffer{}}
	if cmd.Stderr == nil {
		cmd.Stderr = c.out
	}
	if cmd.Stdout == nil {
		cmd.Stdout = c.out
	}
	if ln != nil {
		f, err := ln.File()
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.ExtraFiles = []*os.File{f}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	go func() { _ = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	return c
}

// exited waits for c to exit, and fails the test if it does not.
func (c *child) exited(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s was not killed:\n%s", what, c.out.String())
	}
}

// pythonRig is the refund server, the resolver and the proxy, each on a
// fixed address across restarts.
type pythonRig struct {
	py, dir, ledger, store string
	upLn, resLn            *net.TCPListener
	proxyAddr              string
	upstream, proxy        *child
	proxyLog               lockedBuffer // every proxy process's stderr
}

func listen(t *testing.T) *net.TCPListener {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// startUpstream starts the refund server, SIGKILLing itself once at point
// on key's request when point is not empty.
func (r *pythonRig) startUpstream(t *testing.T, point, key string) {
	cmd := exec.Command(r.py, "-m", "uvicorn", "server:app", "--fd", "3", "--log-level", "warning")
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "LEDGER="+r.ledger, "KILL_AT="+point, "KILL_KEY="+key,
		"KILL_MARK="+filepath.Join(filepath.Dir(r.ledger), "killed-"+point+"-"+key))
	r.upstream = start(t, cmd, r.upLn)
}

// startProxy starts idem proxy as a child process, killing itself at
// point when it is not empty, and waits until it listens.
func (r *pythonRig) startProxy(t *testing.T, point string) {
	t.Helper()
	listenAt := r.proxyAddr
	if listenAt == "" {
		listenAt = "127.0.0.1:0"
	}
	args := []string{"proxy", r.store, "-listen", listenAt, "-upstream", "http://" + r.upLn.Addr().String(),
		"-scope", "header:X-Tenant", "-resolver", "http://" + r.resLn.Addr().String() + "/resolve", "-timeout", "20s",
		"-recovery-grace", "300ms"}
	if point != "" {
		args = append(args, "-kill-at", point)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestProxyCommand_Child$", "-test.count=1")
	cmd.Env = append(os.Environ(), proxyChildEnv+"="+strings.Join(args, "\x1f"))
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = &r.proxyLog
	c := start(t, cmd, nil)
	r.proxy = c
	serving := regexp.MustCompile(`^idem proxy: serving http://(127\.0\.0\.1:\d+) `)
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if m := serving.FindStringSubmatch(sc.Text()); m != nil {
			r.proxyAddr = m[1]
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	go func() { <-c.done; pw.Close() }()
	if r.proxyAddr == "" {
		t.Fatalf("idem proxy did not start: %s", r.proxyLog.String())
	}
}

// answer is what client.py prints.
type answer struct {
	Status   int     `json:"status"`
	Body     string  `json:"body"`
	Replayed *string `json:"replayed"`
}

// callAsync runs the example client for key, retrying until answered.
func (r *pythonRig) callAsync(t *testing.T, key string) func() answer {
	t.Helper()
	var out strings.Builder
	cmd := exec.Command(r.py, "client.py", "http://"+r.proxyAddr+"/refunds", key, "order-"+key, "500", "acme")
	cmd.Dir = r.dir
	cmd.Stdout = &out
	c := start(t, cmd, nil)
	return func() answer {
		t.Helper()
		c.exited(t, "the client")
		var a answer
		if err := json.Unmarshal([]byte(out.String()), &a); err != nil {
			t.Fatalf("client for %s: %v: %q %s", key, err, out.String(), c.out.String())
		}
		return a
	}
}

func TestProxyCommand_PythonUpstream(t *testing.T) {
	py := python(t)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	r := &pythonRig{py: py, dir: filepath.Join(wd, "..", "..", "examples", "proxy-refunds"),
		ledger: filepath.Join(tmp, "ledger.db"), store: filepath.Join(tmp, "store"),
		upLn: listen(t), resLn: listen(t)}
	res := exec.Command(py, "resolver.py", "--fd", "3")
	res.Dir = r.dir
	res.Env = append(os.Environ(), "LEDGER="+r.ledger)
	start(t, res, r.resLn)
	r.startUpstream(t, "", "")
	r.startProxy(t, "")

	type fault struct{ who, point string }
	faults := []fault{{"", ""},
		{"upstream", "before"}, {"upstream", "acted"}, {"upstream", "answered"},
		{"proxy", "claimed"}, {"proxy", "upstream-answered"}, {"proxy", "answered"}}
	firsts := map[string]answer{}
	for i, f := range faults {
		key := fmt.Sprintf("k%d-%s-%s", i, f.who, f.point)
		switch f.who {
		case "upstream":
			_ = r.upstream.cmd.Process.Kill()
			<-r.upstream.done
			r.startUpstream(t, f.point, key)
		case "proxy":
			_ = r.proxy.cmd.Process.Kill()
			<-r.proxy.done
			r.startProxy(t, f.point)
		}
		wait := r.callAsync(t, key)
		switch f.who {
		case "upstream":
			r.upstream.exited(t, "the refund server, at "+f.point)
			r.startUpstream(t, f.point, key) // the mark keeps it alive now
		case "proxy":
			r.proxy.exited(t, "idem proxy, at "+f.point)
			r.startProxy(t, "")
		}
		a := wait()
		if a.Status != http.StatusCreated {
			t.Fatalf("%s killed at %s: the call answered %d %s\nproxy: %s", f.who, f.point, a.Status, a.Body, r.proxyLog.String())
		}
		firsts[key] = a
	}
	// Every key once more: the first answer, replayed.
	for key, first := range firsts {
		a := r.callAsync(t, key)()
		if a.Status != http.StatusCreated || a.Body != first.Body || a.Replayed == nil || *a.Replayed != "true" {
			t.Errorf("%s again: %d %s (replayed %v), want the first answer %s replayed", key, a.Status, a.Body, a.Replayed, first.Body)
		}
	}
	// The ledger: one refund per key.
	resp, err := http.Get("http://" + r.upLn.Addr().String() + "/ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rows []struct {
		Key string `json:"key"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rows); err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, row := range rows {
		per[row.Key]++
	}
	for key := range firsts {
		if per[key] != 1 {
			t.Errorf("key %s: %d refunds in the ledger, want 1", key, per[key])
		}
	}
	t.Logf("the proxies' log:\n%s", r.proxyLog.String())
	if len(rows) != len(firsts) {
		t.Errorf("the ledger holds %d refunds for %d keys: %v", len(rows), len(firsts), per)
	}
}
