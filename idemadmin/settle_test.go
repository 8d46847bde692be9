package idemadmin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemadmin"
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
