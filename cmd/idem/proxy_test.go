package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// servedProxy is idem proxy running in-process.
type servedProxy struct {
	base  string       // the proxy's address, http://127.0.0.1:PORT
	lines []string     // what it printed to stdout up to base, or to the admin address
	log   lockedBuffer // its stderr: the log
	stop  func() int   // stops it as SIGINT does and returns its exit status
}

// logged returns what the proxy logged so far.
func (sp *servedProxy) logged() string { return sp.log.String() }

// serveProxy starts idem proxy with args (after the command's name) and
// stops it when the test ends, checking that it exits 0. It returns once
// the proxy printed its address and, with -admin, the admin page's.
func serveProxy(t *testing.T, args ...string) *servedProxy {
	t.Helper()
	return serveCommand(t, "proxy", args...)
}

// serveCommand starts idem proxy or idem mcp-proxy (name) with args, as
// serveProxy does.
func serveCommand(t *testing.T, name string, args ...string) *servedProxy {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	sp := &servedProxy{}
	done := make(chan int, 1)
	go func() {
		code := run(ctx, append([]string{name}, args...), pw, &sp.log)
		pw.Close()
		done <- code
	}()
	var once sync.Once
	code := 0
	sp.stop = func() int {
		once.Do(func() {
			cancel()
			code = <-done
		})
		return code
	}
	t.Cleanup(func() {
		if code := sp.stop(); code != 0 {
			t.Errorf("idem %s exited %d: %s", name, code, sp.logged())
		}
	})
	serving := regexp.MustCompile(`^idem (?:mcp-)?proxy: serving (http://127\.0\.0\.1:\d+) `)
	admin := strings.Contains(strings.Join(args, " "), "-admin")
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		sp.lines = append(sp.lines, sc.Text())
		if m := serving.FindStringSubmatch(sc.Text()); m != nil {
			sp.base = m[1]
		}
		if sp.base != "" && (!admin || strings.HasPrefix(sc.Text(), "open: ")) {
			break
		}
	}
	if sp.base == "" {
		t.Fatalf("idem %s printed no address: %s", name, sp.logged())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	return sp
}

// countingUpstream counts the requests it answers with 201.
func countingUpstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"refund":"re_`+strings.Repeat("1", int(n.Add(1)))+`"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// send posts body to url with the headers given as name, value pairs.
func send(t *testing.T, url, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestProxyCommand runs the first example of idem proxy -h in earnest, in
// front of a real upstream: the first request runs, its repeat replays,
// and each is logged with its key and decision.
func TestProxyCommand(t *testing.T) {
	up, runs := countingUpstream(t)
	ex := examples(t, "proxy")[0]
	words := shellWords(strings.NewReplacer("/var/lib/refund-tool/idem", t.TempDir(),
		"127.0.0.1:8080", "127.0.0.1:0", "http://127.0.0.1:8000", up.URL).Replace(ex))
	sp := serveProxy(t, words[2:]...)

	first, body1 := send(t, sp.base+"/refunds", `{"order":"o-1"}`, "Idempotency-Key", "k-1", "X-Tenant", "acme")
	again, body2 := send(t, sp.base+"/refunds", `{"order":"o-1"}`, "Idempotency-Key", "k-1", "X-Tenant", "acme")
	if first.StatusCode != 201 || again.StatusCode != 201 || body1 != body2 || again.Header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("first %d %s, repeat %d %s %v", first.StatusCode, body1, again.StatusCode, body2, again.Header)
	}
	if resp, _ := send(t, sp.base+"/refunds", `{}`, "Idempotency-Key", "k-2"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no X-Tenant: %d, want 401", resp.StatusCode)
	}
	if runs.Load() != 1 {
		t.Fatalf("upstream ran %d times, want 1", runs.Load())
	}
	log := sp.logged()
	for _, want := range []string{`key=k-1 status=201 decision="ran: recorded"`, `key=k-1 status=201 decision=replayed`,
		`key=k-2 status=401 decision=refused`} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
}

// TestProxyCommand_Admin serves the admin page beside the proxy, behind
// its token.
func TestProxyCommand_Admin(t *testing.T) {
	up, _ := countingUpstream(t)
	sp := serveProxy(t, t.TempDir(), "-listen", "127.0.0.1:0", "-upstream", up.URL, "-scope", "shared",
		"-admin", "127.0.0.1:0")
	send(t, sp.base+"/refunds", `{}`, "Idempotency-Key", "k-1")
	open := regexp.MustCompile(`^open: (http://127\.0\.0\.1:\d+/)\?token=([0-9a-f]{32})$`)
	m := open.FindStringSubmatch(sp.lines[len(sp.lines)-1])
	if m == nil {
		t.Fatalf("no admin address: %q", sp.lines)
	}
	get := func(token string) int {
		req, _ := http.NewRequest(http.MethodGet, m[1]+"inspect?scope=&key=k-1", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(""); code != http.StatusUnauthorized {
		t.Errorf("admin without the token: %d", code)
	}
	if code := get(m[2]); code != http.StatusOK {
		t.Errorf("admin inspect with the token: %d", code)
	}
}

// TestProxyCommand_Usage refuses a proxy without an upstream or a scope.
func TestProxyCommand_Usage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"proxy", dir, "-scope", "shared"},
		{"proxy", dir, "-upstream", "http://127.0.0.1:1"},
		{"proxy", dir, "-upstream", "http://127.0.0.1:1", "-scope", "tenant"},
		{"proxy", "-upstream", "http://127.0.0.1:1", "-scope", "shared"},
	} {
		if code, _, stderr := runIdem(t, args...); code != 2 {
			t.Errorf("idem %q: exit %d, want 2\n%s", args, code, stderr)
		}
	}
}

// TestProxyCommand_GracefulStop stops the proxy while a request is at the
// upstream: the request finishes, its answer is recorded and sent, and the
// proxy exits 0 once it has.
func TestProxyCommand_GracefulStop(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "refunded")
	}))
	defer up.Close()
	dir := t.TempDir()
	sp := serveProxy(t, dir, "-listen", "127.0.0.1:0", "-upstream", up.URL, "-scope", "shared")
	answered := make(chan string, 1)
	go func() {
		resp, body := send(t, sp.base+"/refunds", `{}`, "Idempotency-Key", "k-stop")
		answered <- fmt.Sprint(resp.StatusCode, " ", body)
	}()
	<-arrived
	stopped := make(chan int, 1)
	go func() { stopped <- sp.stop() }()
	// The stop waits for the request at the upstream.
	select {
	case code := <-stopped:
		t.Fatalf("the proxy exited %d with a request in flight", code)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if got := <-answered; got != "201 refunded" {
		t.Fatalf("the request in flight got %q", got)
	}
	if code := <-stopped; code != 0 {
		t.Fatalf("exit %d: %s", code, sp.logged())
	}
	// The answer was recorded: the store says so.
	if out := mustRun(t, "inspect", dir, "k-stop"); !strings.Contains(out, "201") {
		t.Fatalf("inspect after the stop:\n%s", out)
	}
}
