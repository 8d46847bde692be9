package idemhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

func TestSetFence_CarriesKeyAndToken(t *testing.T) {
	got := make(chan http.Header, 1)
	downstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
	}))
	defer downstream.Close()
	store := newStore(t, nil)

	var token uint64
	_, _, err := store.Do(context.Background(), idem.Request{Key: "pay-1", Fingerprint: "fp"}, func(ctx context.Context) (idem.Result, error) {
		c, _ := idem.ClaimFromContext(ctx)
		token = c.Token()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, downstream.URL, nil)
		if err != nil {
			return idem.Result{}, err
		}
		if !idemhttp.SetFence(ctx, req) {
			t.Error("SetFence found no claim in the effect's context")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return idem.Result{}, err
		}
		_ = resp.Body.Close()
		return idem.Result{Status: resp.StatusCode}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h := <-got
	if h.Get(idemhttp.HeaderKey) != "pay-1" || h.Get(idemhttp.HeaderFencingToken) != strconv.FormatUint(token, 10) || token == 0 {
		t.Fatalf("downstream got key %q token %q, want pay-1 %d", h.Get(idemhttp.HeaderKey), h.Get(idemhttp.HeaderFencingToken), token)
	}
}

func TestSetFence_NoClaim(t *testing.T) {
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	if idemhttp.SetFence(context.Background(), req) || req.Header.Get(idemhttp.HeaderFencingToken) != "" {
		t.Fatal("SetFence without a claim changed the request")
	}
}
