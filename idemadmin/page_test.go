package idemadmin_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemadmin"
)

// browser is a client with cookies, as a browser keeps them, that sends a
// role header and asks for HTML.
type browser struct {
	t    *testing.T
	e    *adminEnv
	c    *http.Client
	role string
}

func (e *adminEnv) browser(t *testing.T, role string) *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &browser{t: t, e: e, c: c, role: role}
}

// do sends a request to the handler's path and returns the status, the
// response and its body.
func (b *browser) do(method, path string, form url.Values, header ...string) (int, *http.Response, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.e.srv.URL+"/admin/idem"+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/html")
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if b.role != "" {
		req.Header.Set("X-Role", b.role)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return resp.StatusCode, resp, string(out)
}

// get requests path and fails unless the answer is 200.
func (b *browser) get(path string) string {
	b.t.Helper()
	code, _, body := b.do("GET", path, nil)
	if code != http.StatusOK {
		b.t.Fatalf("GET %s as %q: %d\n%s", path, b.role, code, body)
	}
	return body
}

var csrfValue = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of the first form on page.
func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfValue.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the page:\n%s", page)
	}
	return m[1]
}

func hasAll(t *testing.T, what, page string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(page, w) {
			t.Errorf("%s lacks %q", what, w)
		}
	}
}

func hasNone(t *testing.T, what, page string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if strings.Contains(page, w) {
			t.Errorf("%s holds %q", what, w)
		}
	}
}

// evilKey and evilScope are stored values that would run a script, or
// break out of an attribute, if the page did not escape them.
const (
	evilKey   = `<script>alert("key")</script>`
	evilScope = `"><img src=x onerror=alert(1)>`
	evilBody  = `{"note":"</pre><script>alert('body')</script>"}`
)

func newPageEnv(t *testing.T) *adminEnv {
	e := newAdminEnv(t, nil)
	e.do(t, "refund:1", 201)
	e.clock.Advance(time.Minute)
	e.do(t, "refund:2", 503) // released
	_, _, err := e.store.Do(context.Background(), idem.Request{Scope: evilScope, Key: evilKey, Fingerprint: "fp"},
		func(context.Context) (idem.Result, error) {
			return idem.Result{Status: 200, Body: []byte(evilBody),
				Header: map[string][]string{"Content-Type": {"application/json"}}}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	e.hold(t, "refund:held")
	e.clock.Advance(time.Minute)
	return e
}

func TestPage_List(t *testing.T) {
	e := newPageEnv(t)
	b := e.browser(t, "viewer")
	page := b.get("/ui/")
	// The stuck claim is the first row.
	rows := strings.Split(page, `<tr class="c-`)
	if len(rows) != 5 || !strings.HasPrefix(rows[1], `stuck"`) || !strings.Contains(rows[1], "refund:held") {
		t.Fatalf("want 4 rows, the stuck claim first:\n%s", page)
	}
	hasAll(t, "the list", page, "4 matching of 4 records", `href="key?scope=shop-1&amp;key=refund%3aheld"`)
	hasNone(t, "a viewer's list", page, `action="sweep"`)
	if page := e.browser(t, "operator").get("/ui/"); !strings.Contains(page, `action="sweep"`) {
		t.Errorf("an operator's list has no sweep form:\n%s", page)
	}

	page = b.get("/ui/?state=released&scope=shop-1&older_than=90s")
	hasAll(t, "the filtered list", page, "1 matching of 4 records", "refund:2", `<option value="released" selected>`)
	hasNone(t, "the filtered list", page, "refund:held")

	for _, q := range []string{"state=bogus", "older_than=soon", "page=0", "page=x", "page=21"} {
		if code, _, body := b.do("GET", "/ui/?"+q, nil); code != http.StatusBadRequest || !strings.Contains(body, `id="error"`) {
			t.Errorf("%s: %d\n%s", q, code, body)
		}
	}
}

func TestPage_List_Pages(t *testing.T) {
	e := newAdminEnv(t, nil)
	for i := range 55 {
		e.do(t, "refund:"+string(rune('a'+i/26))+string(rune('a'+i%26)), 201)
		e.clock.Advance(time.Second)
	}
	b := e.browser(t, "viewer")
	page := b.get("/ui/")
	hasAll(t, "page 1", page, "page 1 of 2", `href="./?page=2"`, "refund:aa")
	hasNone(t, "page 1", page, "refund:cc", `rel="prev"`)
	page = b.get("/ui/?page=2")
	hasAll(t, "page 2", page, "page 2 of 2", "refund:cc", `href="./?"`)
	if n := strings.Count(page, `<tr class="c-`); n != 5 {
		t.Errorf("page 2 shows %d rows, want 5", n)
	}
}

func TestPage_Key_Escapes(t *testing.T) {
	e := newPageEnv(t)
	path := "/ui/key?" + url.Values{"scope": {evilScope}, "key": {evilKey}}.Encode()
	for _, role := range []string{"viewer", "auditor"} {
		page := e.browser(t, role).get(path)
		hasNone(t, role+"'s timeline", page, "<script>", "<img", "</pre><")
		hasAll(t, role+"'s timeline", page, "&lt;script&gt;alert(&#34;key&#34;)&lt;/script&gt;", "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;")
	}
	list := e.browser(t, "viewer").get("/ui/")
	hasNone(t, "the list", list, "<script>", "<img")
	// In an attribute, the query is escaped for a URL.
	hasAll(t, "the list", list, "key=%3cscript%3ealert%28%22key%22%29%3c%2fscript%3e")
}

func TestPage_Key_Bodies(t *testing.T) {
	e := newPageEnv(t)
	path := "/ui/key?" + url.Values{"scope": {evilScope}, "key": {evilKey}}.Encode()
	page := e.browser(t, "viewer").get(path)
	hasAll(t, "a viewer's timeline", page, `id="body-hidden"`, "status 200 saved", "replays until then")
	hasNone(t, "a viewer's timeline", page, "alert(&#39;body&#39;)", "application/json")
	page = e.browser(t, "auditor").get(path)
	hasAll(t, "an auditor's timeline", page, `<pre id="body">{&#34;note&#34;:&#34;&lt;/pre&gt;&lt;script&gt;alert(&#39;body&#39;)`,
		"Content-Type: application/json")
}

func TestPage_Refused(t *testing.T) {
	e := newPageEnv(t)
	anon := e.browser(t, "")
	for _, p := range []string{"/ui/", "/ui/key?scope=shop-1&key=refund:1", "/ui/stats", "/ui/style.css"} {
		if code, _, _ := anon.do("GET", p, nil); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a role: %d", p, code)
		}
	}
	for _, p := range []string{"/ui/settle", "/ui/sweep"} {
		if code, _, _ := anon.do("POST", p, url.Values{}); code != http.StatusUnauthorized {
			t.Errorf("POST %s without a role: %d", p, code)
		}
		if code, _, body := e.browser(t, "auditor").do("POST", p, url.Values{}); code != http.StatusForbidden ||
			!strings.Contains(body, "needs") {
			t.Errorf("POST %s as an auditor: %d %s", p, code, body)
		}
	}
	// A viewer sees the stale claim, but no form to settle it.
	page := e.browser(t, "viewer").get("/ui/key?scope=shop-1&key=refund:held")
	hasAll(t, "a viewer's stale claim", page, "your access does not include settling it")
	hasNone(t, "a viewer's stale claim", page, `id="settle"`)
}

func TestPage_Settle(t *testing.T) {
	e := newPageEnv(t)
	b := e.browser(t, "operator")
	page := b.get("/ui/key?scope=shop-1&key=refund:held")
	hasAll(t, "the stuck claim", page, `id="settle"`, `<span class="badge stuck">`)
	for k, v := range pageHeaders(t, b, "/ui/key?scope=shop-1&key=refund:held") {
		if v == "" {
			t.Errorf("no %s header", k)
		}
	}
	form := url.Values{"scope": {"shop-1"}, "key": {"refund:held"}, "verdict": {"committed"}, "status": {"201"},
		"content_type": {"application/json"}, "body": {`{"refund":"re_7"}`}, "by": {"ana"}, "note": {"the ledger has re_7"}}

	// Without the token, with a wrong one, from another origin: refused.
	if code, _, body := b.do("POST", "/ui/settle", form); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("no token: %d\n%s", code, body)
	}
	form.Set("csrf", "forged")
	if code, _, _ := b.do("POST", "/ui/settle", form); code != http.StatusForbidden {
		t.Errorf("forged token: %d", code)
	}
	form.Set("csrf", csrfOf(t, page))
	if code, _, body := e.browser(t, "operator").do("POST", "/ui/settle", form); code != http.StatusForbidden {
		t.Errorf("a token without its cookie (another browser): %d\n%s", code, body)
	}
	if code, _, _ := b.do("POST", "/ui/settle", form, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Errorf("cross-site: %d", code)
	}
	if code, _, _ := b.do("POST", "/ui/settle", form, "Origin", "https://evil.example"); code != http.StatusForbidden {
		t.Errorf("another origin: %d", code)
	}
	if code, _, body := b.do("POST", "/ui/settle", url.Values{"csrf": {form.Get("csrf")}, "scope": {"shop-1"},
		"key": {"refund:held"}, "verdict": {"committed"}, "by": {"ana"}, "note": {"x"}}); code != http.StatusBadRequest ||
		!strings.Contains(body, "status") {
		t.Errorf("committed without a status: %d\n%s", code, body)
	}

	code, resp, body := b.do("POST", "/ui/settle", form)
	if code != http.StatusSeeOther || resp.Header.Get("Location") != "key?key=refund%3Aheld&scope=shop-1&settled=1" {
		t.Fatalf("settle: %d %v\n%s", code, resp.Header, body)
	}
	page = b.get("/ui/key?key=refund%3Aheld&scope=shop-1&settled=1")
	hasAll(t, "the settled key", page, `id="settled"`, `<span class="badge done">`,
		"settled by an operator: committed (ana: the ledger has re_7)", `{&#34;refund&#34;:&#34;re_7&#34;}`)
	hasNone(t, "the settled key", page, `id="settle"`)
	// Posted again (a reload of the form): nothing left to settle.
	if code, _, body := b.do("POST", "/ui/settle", form); code != http.StatusConflict {
		t.Errorf("settled twice: %d\n%s", code, body)
	}
}

// pageHeaders returns the headers of path that keep the page safe.
func pageHeaders(t *testing.T, b *browser, path string) map[string]string {
	t.Helper()
	_, resp, _ := b.do("GET", path, nil)
	out := map[string]string{}
	for _, k := range []string{"Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options", "Referrer-Policy"} {
		out[k] = resp.Header.Get(k)
	}
	if !strings.Contains(out["Content-Security-Policy"], "default-src 'none'") {
		t.Errorf("CSP %q lets something load", out["Content-Security-Policy"])
	}
	return out
}

func TestPage_Stats_Sweep(t *testing.T) {
	e := newPageEnv(t)
	b := e.browser(t, "operator")
	page := b.get("/ui/stats")
	hasAll(t, "stats", page, "<svg", `id="free"`, "claims made (4)", "claims ended (3)",
		"(1 stuck, 0 need attention)", `action="sweep"`)
	if n := strings.Count(page, "<rect "); n != 48 {
		t.Errorf("the chart has %d bars, want 48", n)
	}
	e.clock.Advance(48 * time.Hour) // everything done or released expires
	code, _, body := b.do("POST", "/ui/sweep", url.Values{"csrf": {csrfOf(t, page)}})
	if code != http.StatusOK {
		t.Fatalf("sweep: %d\n%s", code, body)
	}
	hasAll(t, "the sweep", body, "Stale claims 1:", "Expired records reclaimed 3", "expired: reclaimed", "No resolver")
	if code, _, _ := b.do("POST", "/ui/sweep", url.Values{}); code != http.StatusForbidden {
		t.Errorf("sweep without a token: %d", code)
	}
}

func TestPage_IndexRedirects(t *testing.T) {
	e := newPageEnv(t)
	code, resp, _ := e.browser(t, "viewer").do("GET", "/", nil)
	if code != http.StatusSeeOther || resp.Header.Get("Location") != "ui/" {
		t.Errorf("a browser at /: %d %v", code, resp.Header)
	}
	if code, body := e.callAs(t, "viewer", "GET", "/", nil); code != 200 || !strings.Contains(body, "endpoints") {
		t.Errorf("a client at /: %d %s", code, body)
	}
}

func TestPage_List_MaxRows(t *testing.T) {
	e := newPageEnv(t)
	h := idemadmin.Handler(e.store, &idemadmin.HandlerOptions{Authorize: byRole, MaxRows: 3})
	get := func(path string) (int, string) {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("X-Role", "viewer")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	code, page := get("/ui/")
	if n := strings.Count(page, `<tr class="c-`); code != http.StatusOK || n != 3 {
		t.Fatalf("%d, %d rows, want 3\n%s", code, n, page)
	}
	hasAll(t, "a capped list", page, "4 matching of 4 records", "the pages show the first 3")
	if code, page := get("/ui/?page=2"); code != http.StatusBadRequest || !strings.Contains(page, "narrow the filters") {
		t.Errorf("past MaxRows: %d\n%s", code, page)
	}
}
