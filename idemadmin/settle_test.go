package idemadmin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/keyring"
)

// postSettle posts req to /settle as role and returns the status and body.
func (e *adminEnv) postSettle(t *testing.T, role string, req any) (int, string) {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	r, err := http.NewRequest("POST", e.srv.URL+"/admin/idem/settle", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("X-Role", role)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestHandler_Settle(t *testing.T) {
	e := newAdminEnv(t, nil) // no resolver: held claims stay unknown
	e.hold(t, "refund:7")
	e.hold(t, "refund:8")
	e.do(t, "refund:9", 201)
	e.clock.Advance(time.Hour)

	committed := idemadmin.SettleRequest{Scope: "shop-1", Key: "refund:7", Committed: true, Status: 201,
		Body: []byte(`{"refund":"re_7"}`), By: "alice", Note: "the ledger has re_7"}
	if code, _ := e.postSettle(t, "auditor", committed); code != http.StatusForbidden {
		t.Fatalf("auditor settled: %d", code)
	}
	code, body := e.postSettle(t, "operator", committed)
	if code != http.StatusOK {
		t.Fatalf("settle: %d %s", code, body)
	}
	var story idemadmin.Story
	if err := json.Unmarshal([]byte(body), &story); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(body, "alice: the ledger has re_7") || !strings.Contains(body, "settled by an operator: committed") {
		t.Fatalf("the story does not say who settled it and why:\n%s", body)
	}
	res, replayed, err := e.store.Do(context.Background(), idem.Request{Scope: "shop-1", Key: "refund:7", Fingerprint: "fp-refund:7"},
		func(context.Context) (idem.Result, error) { t.Fatal("ran again"); return idem.Result{}, nil })
	if err != nil || !replayed || string(res.Body) != `{"refund":"re_7"}` {
		t.Fatalf("after settling: %v %v %s", err, replayed, res.Body)
	}

	for _, tc := range []struct {
		req  any
		want int
	}{
		{committed, http.StatusConflict}, // done now: nothing to settle
		{idemadmin.SettleRequest{Scope: "shop-1", Key: "refund:9", By: "a", Note: "n"}, http.StatusConflict},
		{idemadmin.SettleRequest{Scope: "shop-1", Key: "refund:8", Note: "who?"}, http.StatusBadRequest},
		{idemadmin.SettleRequest{Scope: "shop-1", Key: "refund:8", Committed: true, By: "a", Note: "no status"}, http.StatusBadRequest},
		{map[string]any{"scope": "shop-1", "key": "refund:8", "verdict": "x"}, http.StatusBadRequest},
		{idemadmin.SettleRequest{Scope: "shop-1", Key: "refund:8", By: "bob", Note: "provider: no charge"}, http.StatusOK},
	} {
		if code, body := e.postSettle(t, "operator", tc.req); code != tc.want {
			t.Errorf("%+v: %d, want %d\n%s", tc.req, code, tc.want, body)
		}
	}
	rec, err := e.store.Get(context.Background(), "shop-1", "refund:8")
	if err != nil || rec.State != idem.StateReleased || rec.Recovered != "settled: not_committed" {
		t.Fatalf("refund:8 after settling: %v %+v", err, rec)
	}
}

// On an encrypted store served without its key: a sealed record's story
// reads, its result marked sealed (JSON and page); a committed settle is
// refused (409, naming -keys and $IDEM_KEYS) and writes nothing, unless
// in_clear says so, and then the story says it; a body over the bound is
// refused.
func TestHandler_Settle_EncryptedStore(t *testing.T) {
	dir := t.TempDir()
	ring, err := keyring.New(keyring.Key{ID: "k1", Secret: bytes.Repeat([]byte{5}, keyring.KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	keyed := newAdminEnvOn(t, dir, nil, ring)
	keyed.do(t, "refund:1", 201)
	keyed.hold(t, "refund:7")
	keyed.hold(t, "refund:8")
	if err := keyed.store.Close(); err != nil {
		t.Fatal(err)
	}
	e := newAdminEnvOn(t, dir, nil, nil)
	e.clock.Advance(time.Hour)

	var story idemadmin.Story
	code, body := e.call(t, "GET", "/inspect?scope=shop-1&key=refund:1", &story)
	if code != http.StatusOK || story.Result == nil || story.Result.SealedUnder != "k1" || story.Result.Status != 201 ||
		story.Result.Sealed != `sealed under key "k1" (not given)` || story.Claims != 1 || strings.Contains(body, "refund:1\"}") {
		t.Fatalf("inspect of a sealed record without its key: %d\n%s", code, body)
	}
	page := e.browser(t, "operator").get("/ui/key?scope=shop-1&key=refund:1")
	if !strings.Contains(page, `sealed under key &#34;k1&#34; (not given)`) {
		t.Fatalf("the page does not mark the result sealed:\n%s", page)
	}

	committed := idemadmin.SettleRequest{Scope: "shop-1", Key: "refund:7", Committed: true, Status: 201,
		Body: []byte(`{"refund":"re_7"}`), By: "alice", Note: "the ledger has re_7"}
	code, body = e.postSettle(t, "operator", committed)
	if code != http.StatusConflict || !strings.Contains(body, "-keys") || !strings.Contains(body, "$IDEM_KEYS") ||
		!strings.Contains(body, "in_clear") {
		t.Fatalf("settle in clear without saying so: %d %s", code, body)
	}
	if rec, err := e.store.Get(context.Background(), "shop-1", "refund:7"); err != nil || rec.State != idem.StateInProgress {
		t.Fatalf("a refused settle changed the record: %v %+v", err, rec)
	}
	big := committed
	big.Key, big.InClear, big.Body = "refund:8", true, bytes.Repeat([]byte{'x'}, idemadmin.MaxSettleBody+1)
	if code, body := e.postSettle(t, "operator", big); code != http.StatusBadRequest {
		t.Fatalf("a body over the bound: %d %s", code, body[:min(len(body), 300)])
	}
	// The page's form: refused without the check box, settled with it.
	b := e.browser(t, "operator")
	form := url.Values{"csrf": {csrfOf(t, b.get("/ui/key?scope=shop-1&key=refund:8"))}, "scope": {"shop-1"},
		"key": {"refund:8"}, "verdict": {"committed"}, "status": {"201"}, "body": {"re_8"}, "by": {"ana"}, "note": {"n"}}
	if code, _, body := b.do("POST", "/ui/settle", form); code != http.StatusConflict || !strings.Contains(body, "$IDEM_KEYS") {
		t.Fatalf("the page's settle in clear without the check box: %d\n%s", code, body)
	}
	form.Set("in_clear", "1")
	if code, _, body := b.do("POST", "/ui/settle", form); code != http.StatusSeeOther {
		t.Fatalf("the page's settle with the check box: %d\n%s", code, body)
	}
	if page := b.get("/ui/key?scope=shop-1&key=refund:8"); !strings.Contains(page, "committed, in clear (ana: n)") {
		t.Fatalf("the page's story does not say the result is in clear:\n%s", page)
	}

	committed.InClear = true
	code, body = e.postSettle(t, "operator", committed)
	if code != http.StatusOK || !strings.Contains(body, "settled by an operator: committed, in clear (alice: the ledger has re_7)") {
		t.Fatalf("settle told in_clear: %d %s", code, body)
	}
}
