package idemadmin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"expvar"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keyring"
)

// adminEnv is a store on disk with a fake clock, its admin handler
// mounted under /admin/idem/ on a real 127.0.0.1 server, the Decisions
// observer and expvar metrics wired in as a server would.
type adminEnv struct {
	store     *idem.Store
	clock     *idemtest.Clock
	metrics   *expvar.Map
	srv       *httptest.Server
	decisions *idemadmin.Decisions
}

func newAdminEnv(t *testing.T, resolver idem.Resolver) *adminEnv {
	t.Helper()
	return newAdminEnvOn(t, t.TempDir(), resolver, nil)
}

// newAdminEnvOn is newAdminEnv on the store in dir, opened with keys.
func newAdminEnvOn(t *testing.T, dir string, resolver idem.Resolver, keys *keyring.Ring) *adminEnv {
	t.Helper()
	e := &adminEnv{clock: idemtest.NewClock(t0), metrics: new(expvar.Map), decisions: &idemadmin.Decisions{}}
	m := idemadmin.Expvar(e.metrics)
	var err error
	e.store, err = idem.Open(dir, &idem.Options{
		Clock: e.clock, SweepInterval: -1, Resolver: resolver, CloseTimeout: 10 * time.Millisecond,
		Observer: idem.Observers(e.decisions, idemadmin.CountEvents(m)), Keys: keys,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.store.Close() })
	mux := http.NewServeMux()
	mux.Handle("/admin/idem/", http.StripPrefix("/admin/idem", idemadmin.Handler(e.store,
		&idemadmin.HandlerOptions{Authorize: byRole, Decisions: e.decisions, Metrics: m})))
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

// byRole is an Authorizer: the X-Role header names what the caller may do
// (a real one verifies credentials). "operator" may do everything,
// "auditor" read with bodies, "viewer" read only.
func byRole(r *http.Request, a idemadmin.Access) error {
	role := r.Header.Get("X-Role")
	switch {
	case role == "":
		return fmt.Errorf("no role: %w", idemadmin.ErrUnauthenticated)
	case role == "operator",
		role == "auditor" && a != idemadmin.AccessSweep && a != idemadmin.AccessSettle,
		role == "viewer" && a == idemadmin.AccessRead:
		return nil
	}
	return fmt.Errorf("role %s may not %s", role, a)
}

// call requests path as an operator and decodes a JSON answer into v (if
// not nil).
func (e *adminEnv) call(t *testing.T, method, path string, v any) (int, string) {
	t.Helper()
	return e.callAs(t, "operator", method, path, v)
}

// callAs is call with the given role ("" for none).
func (e *adminEnv) callAs(t *testing.T, role, method, path string, v any) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+"/admin/idem"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if role != "" {
		req.Header.Set("X-Role", role)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("%s %s: %v\n%s", method, path, err, body)
		}
	}
	return resp.StatusCode, string(body)
}

func (e *adminEnv) do(t *testing.T, key string, status int) {
	t.Helper()
	_, _, err := e.store.Do(context.Background(), idem.Request{Scope: "shop-1", Key: key, Fingerprint: "fp-" + key},
		func(context.Context) (idem.Result, error) {
			return idem.Result{Status: status, Body: []byte(`{"key":"` + key + `"}`)}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
}

func (e *adminEnv) hold(t *testing.T, key string) {
	t.Helper()
	ctx := context.Background()
	c, _, err := e.store.Begin(ctx, idem.Request{Scope: "shop-1", Key: key, Fingerprint: "fp-" + key})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Hold(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestHandler(t *testing.T) {
	resolver := idem.ResolverFunc(func(_ context.Context, rec *idem.Record) (idem.Resolution, error) {
		if rec.Key == "refund:held-commit" {
			return idem.Resolution{Verdict: idem.VerdictCommitted, Result: idem.Result{Status: 201}}, nil
		}
		return idem.Resolution{Verdict: idem.VerdictUnknown}, nil
	})
	e := newAdminEnv(t, resolver)
	e.do(t, "refund:1", 201)
	e.clock.Advance(time.Minute)
	e.do(t, "refund:1", 201) // replayed
	e.do(t, "refund:2", 503) // released
	e.clock.Advance(time.Minute)
	e.hold(t, "refund:held-commit")
	e.hold(t, "refund:held-unknown")
	e.clock.Advance(time.Minute)

	t.Run("index", func(t *testing.T) {
		code, body := e.call(t, "GET", "/", nil)
		if code != 200 || !strings.Contains(body, "POST sweep") {
			t.Errorf("%d %s", code, body)
		}
	})

	t.Run("inspect", func(t *testing.T) {
		var s idemadmin.Story
		code, body := e.call(t, "GET", "/inspect?scope=shop-1&key=refund:1", &s)
		if code != 200 || s.Condition != "done" || s.Result.Status != 201 || s.Claims != 1 || !s.Now.Equal(e.clock.Now()) {
			t.Fatalf("%d %s", code, body)
		}
		if code, body := e.call(t, "GET", "/inspect?scope=shop-1&key=nope", nil); code != 404 || !strings.Contains(body, `"error"`) {
			t.Errorf("unknown key: %d %s", code, body)
		}
		if code, body := e.call(t, "GET", "/inspect?scope=shop-1", nil); code != 400 {
			t.Errorf("no key: %d %s", code, body)
		}
		code, body = e.call(t, "GET", "/inspect?scope=shop-1&key=refund:2&format=text", nil)
		if code != 200 || !strings.Contains(body, "released (status 503)") || !strings.Contains(body, "TIME") {
			t.Errorf("text: %d %s", code, body)
		}
	})

	t.Run("ls", func(t *testing.T) {
		var l idemadmin.Listing
		code, body := e.call(t, "GET", "/ls", &l)
		if code != 200 || len(l.Rows) != 4 || l.Rows[0].Condition != "stuck" || l.Rows[1].Condition != "stuck" {
			t.Fatalf("%d %s", code, body)
		}
		l = idemadmin.Listing{}
		code, body = e.call(t, "GET", "/ls?state=done&scope=shop-1&older_than=90s&limit=5", &l)
		if code != 200 || len(l.Rows) != 1 || l.Rows[0].Key != "refund:1" {
			t.Fatalf("filtered: %d %s", code, body)
		}
		l = idemadmin.Listing{}
		if code, body := e.call(t, "GET", "/ls?limit=1", &l); code != 200 || len(l.Rows) != 1 || l.Matched != 4 {
			t.Errorf("limit: %d %s", code, body)
		}
		l = idemadmin.Listing{}
		if code, _ := e.call(t, "GET", "/ls?scope=other", &l); code != 200 || len(l.Rows) != 0 || l.Scanned != 4 {
			t.Errorf("other scope: %+v", l)
		}
		for _, q := range []string{"state=bogus", "older_than=soon", "limit=0", "limit=x"} {
			if code, body := e.call(t, "GET", "/ls?"+q, nil); code != 400 {
				t.Errorf("%s: %d %s", q, code, body)
			}
		}
	})

	t.Run("stats", func(t *testing.T) {
		var st idemadmin.Stats
		code, body := e.call(t, "GET", "/stats", &st)
		if code != 200 || st.Records != 4 || st.InProgress != 2 || st.Stuck != 2 || st.Done != 1 || st.Released != 1 ||
			st.Disk == nil || st.Disk.Total == 0 || st.Disk.Total > 64<<20 {
			t.Fatalf("%d %s", code, body)
		}
		// The store is on a real file system: its free space is measured,
		// and the reserve is the budget's default, not zero.
		if st.Disk.Free == nil || *st.Disk.Free <= 0 || st.Disk.Reserve <= 0 {
			t.Errorf("disk free %v, reserve %d", st.Disk.Free, st.Disk.Reserve)
		}
		if got := e.metrics.Get("disk_reserve_bytes"); got == nil || got.String() == "0" {
			t.Errorf("gauge disk_reserve_bytes = %v", got)
		}
		if got := e.metrics.Get("records_stuck"); got == nil || got.String() != "2" {
			t.Errorf("gauge records_stuck = %v", got)
		}
		if got := e.metrics.Get("oldest_open_claim_seconds"); got == nil || got.String() != "60" {
			t.Errorf("gauge oldest_open_claim_seconds = %v", got)
		}
	})

	t.Run("sweep", func(t *testing.T) {
		if code, _ := e.call(t, "GET", "/sweep", nil); code != http.StatusMethodNotAllowed {
			t.Errorf("GET sweep: %d", code)
		}
		var res idemadmin.SweepResult
		code, body := e.call(t, "POST", "/sweep", &res)
		if code != 200 || !res.Resolver || res.Counts.Committed != 1 || res.Counts.Unknown != 1 || len(res.Decisions) != 2 {
			t.Fatalf("%d %s", code, body)
		}
		got := map[string]string{}
		for _, d := range res.Decisions {
			got[d.Key] = d.Event + "/" + d.Verdict
		}
		if got["refund:held-commit"] != "recovered/committed" || got["refund:held-unknown"] != "unknown/unknown" {
			t.Errorf("decisions %v", got)
		}
		if e.metrics.Get("recovered_committed").String() != "1" || e.metrics.Get("events_unknown").String() != "1" {
			t.Errorf("counters: %s", e.metrics)
		}
		// Events outside a sweep are not decisions of the next one.
		e.do(t, "refund:1", 201)
		res = idemadmin.SweepResult{}
		if code, body := e.call(t, "POST", "/sweep?format=text", nil); code != 200 || !strings.Contains(body, "stale claims 0") {
			t.Errorf("second sweep: %d %s", code, body)
		}
	})

	t.Run("export", func(t *testing.T) {
		// Bodies stay out unless asked for.
		for _, query := range []string{"", "?bodies=false"} {
			code, body := e.call(t, "GET", "/export"+query, nil)
			lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
			if code != 200 || len(lines) != 4 {
				t.Fatalf("export%s: %d, %d lines\n%s", query, code, len(lines), body)
			}
			for _, line := range lines {
				var a idemadmin.AuditRecord
				if err := json.Unmarshal([]byte(line), &a); err != nil {
					t.Fatal(err)
				}
				if a.Result != nil && (a.Result.Body != nil || (a.Key == "refund:1" && a.Result.BodyBytes == 0)) {
					t.Errorf("export%s: %s", query, line)
				}
			}
		}
		req, err := http.NewRequest("GET", e.srv.URL+"/admin/idem/export?bodies=true", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Role", "auditor")
		got, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer got.Body.Close()
		if ct := got.Header.Get("Content-Type"); got.StatusCode != 200 || ct != "application/x-ndjson" {
			t.Fatalf("%d %s", got.StatusCode, ct)
		}
		withBody := 0
		for sc := bufio.NewScanner(got.Body); sc.Scan(); {
			var a idemadmin.AuditRecord
			if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
				t.Fatal(err)
			}
			if a.Result != nil && string(a.Result.Body) == `{"key":"refund:1"}` {
				withBody++
			}
		}
		if withBody != 1 {
			t.Errorf("bodies=true: %d records with their body, want 1", withBody)
		}
		if code, _ := e.call(t, "GET", "/export?bodies=maybe", nil); code != 400 {
			t.Errorf("bodies=maybe: %d", code)
		}
	})

	t.Run("closed store", func(t *testing.T) {
		if err := e.store.Close(); err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/inspect?key=refund:1&scope=shop-1", "/stats", "/ls", "/export"} {
			if code, body := e.call(t, "GET", path, nil); code != http.StatusServiceUnavailable {
				t.Errorf("%s after Close: %d %s", path, code, body)
			}
		}
		if code, _ := e.call(t, "POST", "/sweep", nil); code != http.StatusServiceUnavailable {
			t.Errorf("sweep after Close: %d", code)
		}
	})
}

// noLister hides the backend's Scan.
type noLister struct{ backend.Backend }

func TestHandler_NotALister(t *testing.T) {
	b, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	store := idem.New(noLister{b}, &idem.Options{SweepInterval: -1})
	defer store.Close()
	srv := httptest.NewServer(idemadmin.Handler(store, &idemadmin.HandlerOptions{
		Authorize: func(*http.Request, idemadmin.Access) error { return nil }}))
	defer srv.Close()
	for _, path := range []string{"/ls", "/stats", "/export"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotImplemented {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
	// Sweep without Decisions reports counts only.
	resp, err := http.Post(srv.URL+"/sweep", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res idemadmin.SweepResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != 200 || res.Decisions != nil {
		t.Errorf("%d %+v %v", resp.StatusCode, res, err)
	}
}

func TestExpvar(t *testing.T) {
	m := new(expvar.Map)
	metrics := idemadmin.Expvar(m)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 100 {
				metrics.Add("events_claimed", 1)
				metrics.Set("records", float64(i))
			}
		})
	}
	wg.Wait()
	if got := m.Get("events_claimed").(*expvar.Int).Value(); got != 800 {
		t.Errorf("counter %d, want 800", got)
	}
	if got := m.Get("records").(*expvar.Float).Value(); got != 99 {
		t.Errorf("gauge %v, want 99", got)
	}
	// A name first used as a counter becomes a gauge when set.
	metrics.Add("x", 1)
	metrics.Set("x", 2.5)
	if got := m.Get("x").String(); got != "2.5" {
		t.Errorf("x = %s", got)
	}
	var v map[string]float64
	if err := json.Unmarshal([]byte(m.String()), &v); err != nil || v["events_claimed"] != 800 {
		t.Errorf("%s: %v", m.String(), err)
	}
}

func TestCountEvents_EveryKind(t *testing.T) {
	m := new(expvar.Map)
	obs := idemadmin.CountEvents(idemadmin.Expvar(m))
	for k := idem.EventClaimed; k <= idem.EventError; k++ {
		obs.Observe(idem.Event{Kind: k})
	}
	obs.Observe(idem.Event{Kind: idem.EventRecovered, Verdict: "not_committed"})
	n := 0
	m.Do(func(kv expvar.KeyValue) { n++ })
	// 15 kinds, plus one verdict.
	if n != 16 || m.Get("events_recovered").String() != "2" || m.Get("recovered_not_committed").String() != "1" {
		t.Errorf("%d names: %s", n, m)
	}
	if strings.Contains(m.String(), `"events_event"`) {
		t.Errorf("an event kind has no name: %s", m)
	}
}

func TestHandler_AuthorizeRequired(t *testing.T) {
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true}) // the embedded store, in memory
	if err != nil {
		t.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{SweepInterval: -1})
	defer store.Close()
	for name, opts := range map[string]*idemadmin.HandlerOptions{"nil options": nil, "no Authorize": {MaxRows: 5}} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if msg, _ := recover().(string); !strings.Contains(msg, "Authorize") {
					t.Fatalf("panic %q", msg)
				}
			}()
			idemadmin.Handler(store, opts)
		})
	}
}

// TestHandler_Authorize checks that every endpoint asks the Authorizer
// for the access it needs, and that a refused sweep changes nothing.
func TestHandler_Authorize(t *testing.T) {
	resolver := idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})
	e := newAdminEnv(t, resolver)
	e.do(t, "refund:1", 201)
	e.hold(t, "refund:held")
	e.clock.Advance(time.Hour)

	for _, tc := range []struct {
		role, method, path string
		want               int
	}{
		{"", "GET", "/", 401},
		{"", "GET", "/inspect?scope=shop-1&key=refund:1", 401},
		{"", "GET", "/ls", 401},
		{"", "GET", "/stats", 401},
		{"", "GET", "/export", 401},
		{"", "POST", "/sweep", 401},
		{"viewer", "GET", "/", 200},
		{"viewer", "GET", "/inspect?scope=shop-1&key=refund:1", 200},
		{"viewer", "GET", "/ls", 200},
		{"viewer", "GET", "/stats", 200},
		{"viewer", "GET", "/export", 200},
		{"viewer", "GET", "/export?bodies=true", 403},
		{"viewer", "POST", "/sweep", 403},
		{"auditor", "GET", "/export?bodies=true", 200},
		{"auditor", "POST", "/sweep", 403},
		{"intruder", "GET", "/ls", 403},
	} {
		code, body := e.callAs(t, tc.role, tc.method, tc.path, nil)
		if code != tc.want {
			t.Errorf("%q %s %s: %d, want %d\n%s", tc.role, tc.method, tc.path, code, tc.want, body)
		}
		if code >= 400 && (strings.Contains(body, "role") || strings.Contains(body, "refund")) {
			t.Errorf("%q %s %s: the refusal says too much: %s", tc.role, tc.method, tc.path, body)
		}
	}
	// No refused sweep ran: the stale claim is still there to recover.
	var res idemadmin.SweepResult
	if code, body := e.call(t, "POST", "/sweep", &res); code != 200 || res.Counts.NotCommitted != 1 {
		t.Fatalf("the operator's sweep: %d %s", code, body)
	}
}

// TestSweep_NoDecisions checks that a sweep that decided nothing lists no
// decisions as [], not null, when it had a Decisions observer.
func TestSweep_NoDecisions(t *testing.T) {
	e := newAdminEnv(t, nil)
	code, body := e.call(t, "POST", "/sweep", nil)
	if code != 200 || !strings.Contains(body, `"decisions": []`) {
		t.Fatalf("%d %s", code, body)
	}
}

// TestDefaultServeMux_DebugVars pins what idemadmin's package doc warns
// about: importing idem publishes /debug/vars, with Badger's counters and
// the command line, on http.DefaultServeMux.
func TestDefaultServeMux_DebugVars(t *testing.T) {
	req := httptest.NewRequest("GET", "/debug/vars", nil)
	if _, pattern := http.DefaultServeMux.Handler(req); pattern == "" {
		t.Fatal("nothing serves /debug/vars on http.DefaultServeMux: update the package doc and README")
	}
	w := httptest.NewRecorder()
	http.DefaultServeMux.ServeHTTP(w, req)
	body := w.Body.String()
	if w.Code != 200 || !strings.Contains(body, `"cmdline"`) || !strings.Contains(body, `"idem_badger_`) {
		t.Fatalf("%d %.300s", w.Code, body)
	}
}
