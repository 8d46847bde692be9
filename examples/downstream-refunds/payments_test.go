package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
)

// TestPayments_Deduplicates checks the payment API alone: one refund per
// key, a replay marked, another body under the key refused, a key needed.
func TestPayments_Deduplicates(t *testing.T) {
	p, err := OpenPayments(filepath.Join(t.TempDir(), "payments.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	srv := httptest.NewServer(p)
	defer srv.Close()
	post := func(key, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/refunds", strings.NewReader(body))
		if key != "" {
			req.Header.Set(idemhttp.HeaderKey, key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		return res
	}
	body := `{"order_id":"o-1","amount_cents":100}`
	for i, want := range []int{200, 200, 422, 400} {
		key, b := "k", body
		switch i {
		case 2:
			b = `{"order_id":"o-1","amount_cents":999}`
		case 3:
			key = ""
		}
		if res := post(key, b); res.StatusCode != want || (i == 1) != (res.Header.Get(idemhttp.HeaderReplayed) == "true") {
			t.Fatalf("request %d: %s replayed=%q", i, res.Status, res.Header.Get(idemhttp.HeaderReplayed))
		}
	}
	if n := len(p.List()); n != 1 {
		t.Fatalf("%d refunds, want 1", n)
	}
}
