package idemadmin_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemadmin"
)

func TestHandler_Backup(t *testing.T) {
	e := newAdminEnv(t, nil)
	for _, k := range []string{"refund:1", "refund:2", "refund:3"} {
		e.do(t, k, 201)
	}
	if code, _ := e.callAs(t, "", "GET", "/backup", nil); code != http.StatusUnauthorized {
		t.Fatalf("no credentials: status %d, want 401", code)
	}
	if code, _ := e.callAs(t, "viewer", "GET", "/backup", nil); code != http.StatusForbidden {
		t.Fatalf("a viewer, who may not read bodies: status %d, want 403", code)
	}

	resp, err := http.DefaultClient.Do(newGet(t, e.srv.URL+"/admin/idem/backup", "operator"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	file, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("status %d, Content-Type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), file)
	}

	dir := filepath.Join(t.TempDir(), "restored")
	info, err := badgerstore.Restore(context.Background(), bytes.NewReader(file), dir, badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum := resp.Trailer.Get(idemadmin.BackupSHA256Trailer); sum != info.SHA256 {
		t.Fatalf("trailer %q, file's checksum %q", sum, info.SHA256)
	}
	if !info.Time.Equal(t0) {
		t.Fatalf("backup taken at %v, want the store's clock %v", info.Time, t0)
	}
	s, err := idem.Open(dir, &idem.Options{SweepInterval: -1, Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, replayed, err := s.Do(context.Background(), idem.Request{Scope: "shop-1", Key: "refund:2", Fingerprint: "fp-refund:2"},
		func(context.Context) (idem.Result, error) { return idem.Result{}, errors.New("ran again") })
	if err != nil || !replayed || string(res.Body) != `{"key":"refund:2"}` {
		t.Fatalf("restored store: replayed %v, body %q, err %v", replayed, res.Body, err)
	}
}

func newGet(t *testing.T, url, role string) *http.Request {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Role", role)
	return req
}

// TestHandler_Backup_Refused checks the access a backup asks for beyond
// bodies, and the answer for a backend that cannot back itself up.
func TestHandler_Backup_Refused(t *testing.T) {
	b, err := badgerstore.Open(t.TempDir(), badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Embedding only the Backend hides the Badger backend's Backup.
	s := idem.New(struct{ backend.Backend }{b}, &idem.Options{SweepInterval: -1})
	defer s.Close()
	var asked []idemadmin.Access
	srv := httptest.NewServer(idemadmin.Handler(s, &idemadmin.HandlerOptions{Authorize: func(r *http.Request, a idemadmin.Access) error {
		asked = append(asked, a)
		if a == idemadmin.AccessBackup && r.Header.Get("X-Role") != "backup" {
			return errors.New("no backup access")
		}
		return nil
	}}))
	defer srv.Close()
	for _, c := range []struct {
		role string
		want int
	}{{"auditor", http.StatusForbidden}, {"backup", http.StatusNotImplemented}} {
		resp, err := http.DefaultClient.Do(newGet(t, srv.URL+"/backup", c.role))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Fatalf("%s: status %d, want %d: %s", c.role, resp.StatusCode, c.want, body)
		}
	}
	want := []idemadmin.Access{idemadmin.AccessBodies, idemadmin.AccessBackup, idemadmin.AccessBodies, idemadmin.AccessBackup}
	if len(asked) != len(want) {
		t.Fatalf("asked %v, want %v", asked, want)
	}
	for i := range want {
		if asked[i] != want[i] {
			t.Fatalf("asked %v, want %v", asked, want)
		}
	}
}
