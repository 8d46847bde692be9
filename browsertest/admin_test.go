package browsertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/idemkit/idem"
)

// The operator's page in a real browser: idem admin, built from this
// checkout, serves a store directory, and headless Chromium drives it.
//
// Environment:
//
//	IDEM_REQUIRE_BROWSER=1    fail, not skip, when no Chromium is found (CI)
//	IDEM_CHROMIUM=PATH        the browser to drive (default: chromium, chromium-browser,
//	                          google-chrome or chrome on PATH)
//	IDEM_SCREENSHOTS=DIR      write admin-list.png, admin-timeline.png and admin-stats.png there
//	                          (relative to the repository's root: IDEM_SCREENSHOTS=docs)

// evilKey would run a script if the page did not escape it.
const evilKey = `<script>window.pwned=1</script>`

// browserPath returns the Chromium to drive, or skips the test (fails it
// with IDEM_REQUIRE_BROWSER=1) when there is none.
func browserPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("IDEM_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium on PATH (chromium, chromium-browser, google-chrome or chrome; or set IDEM_CHROMIUM): " +
		"the operator's page is not tested in a browser; apt-get install chromium"
	if os.Getenv("IDEM_REQUIRE_BROWSER") == "1" {
		t.Fatal(msg + " (IDEM_REQUIRE_BROWSER=1)")
	}
	t.Skip(msg)
	return ""
}

// buildIdem builds the command line of this checkout, in the library's
// own module (with its go.mod and go.sum, as a user builds it).
func buildIdem(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "idem")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/idem")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build idem: %v\n%s", err, out)
	}
	return bin
}

// writeStore writes a store directory as a tool server leaves it after a
// crash: results saved and replayed, one released, a key holding a
// script, and a claim left open, which idem admin -write orphans (stuck).
func writeStore(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	s, err := idem.Open(dir, &idem.Options{SweepInterval: -1, CloseTimeout: time.Millisecond, Owner: "refund-tool-1"})
	if err != nil {
		t.Fatal(err)
	}
	do := func(scope, key string, status int, body string) {
		t.Helper()
		_, _, err := s.Do(ctx, idem.Request{Scope: scope, Key: key, Fingerprint: "fp-" + key},
			func(context.Context) (idem.Result, error) {
				return idem.Result{Status: status, Body: []byte(body),
					Header: map[string][]string{"Content-Type": {"application/json"}}}, nil
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, order := range []string{"1001", "1002", "1003"} {
		do("shop-1", "refund:order-"+order, 201, `{"refund":"re_`+order+`","amount":1200}`)
	}
	do("shop-1", "refund:order-1001", 201, "") // a replay
	do("shop-2", "refund:order-2001", 503, `{"error":"provider down"}`)
	do("shop-2", evilKey, 200, `{"note":"</pre><script>window.pwned=2</script>"}`)
	if _, _, err := s.Begin(ctx, idem.Request{Scope: "shop-1", Key: "refund:order-1004", Fingerprint: "fp-1004"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startAdmin runs idem admin on dir and returns its address and token.
func startAdmin(t *testing.T, bin string, args ...string) (string, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"admin", "-addr", "127.0.0.1:0"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("idem admin: %v", err)
		}
	})
	open := regexp.MustCompile(`^open: (http://127\.0\.0\.1:\d+/)\?token=([0-9a-f]+)$`)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if m := open.FindStringSubmatch(sc.Text()); m != nil {
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return m[1], m[2]
		}
	}
	t.Fatal("idem admin printed no address with a token")
	return "", ""
}

// newBrowser starts headless Chromium for the test.
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox cannot start
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 800))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return ctx
}

// do runs the browser's steps, failing the test with what it was doing.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs an action that reads a value, failing the test on error.
func get[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// screenshot writes the page as name.png under $IDEM_SCREENSHOTS, if set.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("IDEM_SCREENSHOTS")
	if dir == "" {
		return
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", dir) // relative to the repository's root
	}
	png := get(t, ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestAdminPage opens the list, finds the stuck claim, opens its timeline,
// settles it and sees it done; a key holding a script shows as text; the
// page refuses a browser without the token and a form without its CSRF
// token.
func TestAdminPage(t *testing.T) {
	chromium := browserPath(t)
	base, token := startAdmin(t, buildIdem(t), writeStore(t), "-write")
	ctx := newBrowser(t, chromium)

	for _, p := range []string{"", "ui/", "ui/stats", "ui/key?scope=shop-1&key=refund:order-1004", "ls", "backup"} {
		resp, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET /%s without the token: %d, want 401", p, resp.StatusCode)
		}
	}
	do(t, ctx, "visit without the token", chromedp.Navigate(base+"ui/"))
	if text := get(t, ctx, chromedp.Text(chromedp.CSS("body"))); !strings.Contains(text, "needs the access token") {
		t.Fatalf("without the token the page says:\n%s", text)
	}

	do(t, ctx, "open the list", chromedp.Navigate(base+"?token="+token), chromedp.WaitVisible(chromedp.ID("records")))
	if location := get(t, ctx, chromedp.Location()); !strings.HasSuffix(location, "/ui/") || strings.Contains(location, token) {
		t.Errorf("after the first visit the address is %s, want .../ui/ without the token", location)
	}
	first := get(t, ctx, chromedp.Text(chromedp.CSS("#records tbody tr:first-child td:first-child")))
	firstKey := get(t, ctx, chromedp.Text(chromedp.CSS("#records tbody tr:first-child a.key")))
	if !strings.Contains(first, "stuck") || firstKey != "refund:order-1004" {
		t.Fatalf("the first row is %q %q, want the stuck claim refund:order-1004", first, firstKey)
	}

	keys := get(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#records a.key")].map(a => a.textContent)`))
	scripts := get(t, ctx, chromedp.Evaluate[int](`document.scripts.length`))
	pwned := get(t, ctx, chromedp.Evaluate[bool](`window.pwned !== undefined`))
	if !slices.Contains(keys, evilKey) || scripts != 0 || pwned {
		t.Errorf("the key holding a script: keys %q, %d script elements, pwned %v", keys, scripts, pwned)
	}
	screenshot(t, ctx, "admin-list")

	do(t, ctx, "open the stuck claim's timeline", chromedp.Click(chromedp.CSS("#records tbody tr:first-child a.key")),
		chromedp.WaitVisible(chromedp.ID("timeline")))
	if condition := get(t, ctx, chromedp.Text(chromedp.ID("condition"))); !strings.Contains(condition, "stuck") {
		t.Fatalf("the timeline says %q, want stuck", condition)
	}
	screenshot(t, ctx, "admin-timeline")

	fill := []chromedp.Action[chromedp.Void]{
		chromedp.Click(chromedp.ID("committed")),
		chromedp.SendKeys(chromedp.CSS(`#settle input[name=status]`), "201"),
		chromedp.SendKeys(chromedp.CSS(`#settle textarea[name=body]`), `{"refund":"re_1004"}`),
		chromedp.SendKeys(chromedp.CSS(`#settle input[name=by]`), "ana"),
		chromedp.SendKeys(chromedp.CSS(`#settle input[name=note]`), "the ledger has re_1004"),
	}
	do(t, ctx, "post the form without its CSRF token", append(append([]chromedp.Action[chromedp.Void]{
		chromedp.RemoveAttribute(chromedp.CSS(`#settle input[name=csrf]`), "name")}, fill...),
		chromedp.Click(chromedp.ID("settle-submit")), chromedp.WaitVisible(chromedp.ID("error")))...)
	if text := get(t, ctx, chromedp.Text(chromedp.ID("error"))); !strings.Contains(text, "CSRF") {
		t.Errorf("a form without its CSRF token: %q", text)
	}

	do(t, ctx, "settle it", append(append([]chromedp.Action[chromedp.Void]{
		chromedp.Navigate(base + "ui/key?scope=shop-1&key=refund:order-1004"), chromedp.WaitVisible(chromedp.ID("settle"))}, fill...),
		chromedp.Click(chromedp.ID("settle-submit")), chromedp.WaitVisible(chromedp.ID("settled")))...)
	condition := get(t, ctx, chromedp.Text(chromedp.ID("condition")))
	timeline := get(t, ctx, chromedp.Text(chromedp.ID("timeline")))
	if !strings.Contains(condition, "done") || !strings.Contains(timeline, "settled by an operator: committed (ana: the ledger has re_1004)") {
		t.Errorf("after settling: %q\n%s", condition, timeline)
	}

	do(t, ctx, "open the stats", chromedp.Click(chromedp.CSS(`nav a[href="stats"]`)), chromedp.WaitVisible(chromedp.ID("activity")))
	if bars := get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#activity rect").length`)); bars != 48 {
		t.Errorf("the chart of the last 24 hours has %d bars, want 48", bars)
	}
	if free := get(t, ctx, chromedp.Text(chromedp.ID("free"))); !strings.Contains(free, "iB") {
		t.Errorf("free space: %q", free)
	}
	screenshot(t, ctx, "admin-stats")

	// What the browser saw, the JSON view says too.
	req, _ := http.NewRequest("GET", base+"inspect?scope=shop-1&key=refund:order-1004", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"condition": "done"`) {
		t.Errorf("GET inspect after settling: %s", body)
	}
}

// TestAdminPage_SettlesBinaryBody settles the stuck claim with a file
// chosen in the form: every byte value, which no text field carries; the
// saved body is the file's, byte for byte.
func TestAdminPage_SettlesBinaryBody(t *testing.T) {
	chromium := browserPath(t)
	base, token := startAdmin(t, buildIdem(t), writeStore(t), "-write")
	ctx := newBrowser(t, chromium)

	body := make([]byte, 0, 512)
	for i := range 512 {
		body = append(body, byte(i))
	}
	file := filepath.Join(t.TempDir(), "re_1004.bin")
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "settle with a file", chromedp.Navigate(base+"?token="+token), chromedp.WaitVisible(chromedp.ID("records")),
		chromedp.Navigate(base+"ui/key?scope=shop-1&key=refund:order-1004"), chromedp.WaitVisible(chromedp.ID("settle")),
		chromedp.Click(chromedp.ID("committed")),
		chromedp.SendKeys(chromedp.CSS(`#settle input[name=status]`), "201"),
		chromedp.SetUploadFiles(chromedp.ID("body-file"), []string{file}),
		chromedp.SendKeys(chromedp.CSS(`#settle input[name=by]`), "ana"),
		chromedp.SendKeys(chromedp.CSS(`#settle input[name=note]`), "the provider's receipt"),
		chromedp.Click(chromedp.ID("settle-submit")), chromedp.WaitVisible(chromedp.ID("settled")))
	if condition := get(t, ctx, chromedp.Text(chromedp.ID("condition"))); !strings.Contains(condition, "done") {
		t.Fatalf("after settling with a file: %q", condition)
	}

	req, _ := http.NewRequest("GET", base+"export?bodies=true", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for dec.More() {
		var rec struct {
			Key    string `json:"key"`
			Result *struct {
				Status int    `json:"status"`
				Body   []byte `json:"body"`
			} `json:"result"`
		}
		if err := dec.Decode(&rec); err != nil {
			t.Fatal(err)
		}
		if rec.Key != "refund:order-1004" {
			continue
		}
		if rec.Result == nil || rec.Result.Status != 201 || !bytes.Equal(rec.Result.Body, body) {
			t.Fatalf("the settled result is %+v, want status 201 and the file's %d bytes", rec.Result, len(body))
		}
		return
	}
	t.Fatal("refund:order-1004 is not in the export")
}
