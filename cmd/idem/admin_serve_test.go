package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// servedAdmin is idem admin running in-process on a free port.
type servedAdmin struct {
	base, token string
	stderr      strings.Builder
}

// serveAdmin starts idem admin with args (after the command's name) and
// stops it when the test ends, checking that it exits 0.
func serveAdmin(t *testing.T, args ...string) *servedAdmin {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	sa := &servedAdmin{}
	done := make(chan int, 1)
	go func() {
		code := run(ctx, append([]string{"admin", "-addr", "127.0.0.1:0"}, args...), pw, &sa.stderr)
		pw.Close()
		done <- code
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("idem admin exited %d: %s", code, sa.stderr.String())
		}
	})
	open := regexp.MustCompile(`^open: (http://127\.0\.0\.1:\d+/)\?token=([0-9a-f]{32})$`)
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if m := open.FindStringSubmatch(sc.Text()); m != nil {
			sa.base, sa.token = m[1], m[2]
			break
		}
	}
	if sa.base == "" {
		t.Fatalf("idem admin printed no address with a token: %s", sa.stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	return sa
}

// adminStore writes a store directory with a done key and a claim left
// open, which opening for writing orphans.
func adminStore(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	s, err := idem.Open(dir, &idem.Options{SweepInterval: -1, CloseTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Do(ctx, idem.Request{Scope: "shop-1", Key: "refund:order-1", Fingerprint: "fp-1"},
		func(context.Context) (idem.Result, error) { return idem.Result{Status: 201}, nil }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Begin(ctx, idem.Request{Scope: "shop-1", Key: "refund:order-7", Fingerprint: "fp-7"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func TestAdminServe_Token(t *testing.T) {
	sa := serveAdmin(t, adminStore(t))
	plain := &http.Client{CheckRedirect: noRedirect}
	get := func(c *http.Client, path string, header ...string) (int, *http.Response) {
		t.Helper()
		req, _ := http.NewRequest("GET", sa.base+strings.TrimPrefix(path, "/"), nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp
	}
	// Without the token, or with a wrong one, every path is refused.
	for _, p := range []string{"/", "/ui/", "/ui/key?scope=shop-1&key=refund:order-7", "/ui/stats", "/ui/style.css",
		"/ls", "/inspect?scope=shop-1&key=refund:order-1", "/stats", "/export?bodies=true", "/backup", "/nothing",
		"/?token=" + strings.Repeat("0", 32)} {
		if code, _ := get(plain, p); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d", p, code)
		}
		if code, _ := get(plain, p, "Authorization", "Bearer "+strings.Repeat("0", 32)); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d", p, code)
		}
	}
	for _, p := range []string{"/ui/settle", "/ui/sweep", "/settle", "/sweep"} {
		resp, err := plain.PostForm(sa.base+strings.TrimPrefix(p, "/"), url.Values{})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST %s without the token: %d", p, resp.StatusCode)
		}
	}
	// With the header, the JSON views answer.
	if code, _ := get(plain, "/ls", "Authorization", "Bearer "+sa.token); code != http.StatusOK {
		t.Errorf("GET /ls with the token: %d", code)
	}
	// A first visit with ?token= sets the cookie and leaves the address.
	code, resp := get(plain, "/ui/?state=stuck&token="+sa.token)
	if code != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/?state=stuck" || len(resp.Cookies()) != 1 ||
		!resp.Cookies()[0].HttpOnly {
		t.Fatalf("first visit: %d %v", code, resp.Header)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	if code, resp := get(browser, "/?token="+sa.token, "Accept", "text/html"); code != http.StatusOK ||
		resp.Request.URL.Path != "/ui/" || resp.Request.URL.RawQuery != "" {
		t.Errorf("a browser's first visit: %d, at %s", code, resp.Request.URL)
	}
	if code, _ := get(browser, "/ui/stats"); code != http.StatusOK {
		t.Errorf("the cookie: %d", code)
	}
}

func TestAdminServe_ReadOnly(t *testing.T) {
	dir := adminStore(t)
	for _, tc := range []struct {
		args []string
		want int
	}{{nil, http.StatusForbidden}, {[]string{"-write"}, http.StatusOK}} {
		t.Run(strings.Join(append([]string{"admin"}, tc.args...), " "), func(t *testing.T) {
			sa := serveAdmin(t, append([]string{dir}, tc.args...)...)
			req, _ := http.NewRequest("POST", sa.base+"sweep", nil)
			req.Header.Set("Authorization", "Bearer "+sa.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("POST sweep: %d, want %d\n%s", resp.StatusCode, tc.want, body)
			}
			if tc.want == http.StatusOK && !strings.Contains(string(body), "refund:order-7") {
				t.Errorf("the sweep does not report the orphaned claim:\n%s", body)
			}
		})
	}
}
