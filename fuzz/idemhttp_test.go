package fuzz

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemhttp"
)

// Flags of FuzzMiddleware's flags byte.
const (
	flagBigResponse = 1 << iota // the handler answers more than MaxResponseBytes
	flagFlush                   // the handler flushes mid-response
	flagKeyTwice                // the key header is sent twice
	flagNoKey                   // no key header at all
	flagServerError             // the handler's first run answers 500 (released)
)

// FuzzMiddleware feeds the middleware random methods, keys, content types,
// paths and bodies, each request sent twice and then once more with a
// second body. The middleware must never panic, must answer every refusal
// with a well-formed problem, and must never run the handler twice for one
// key: the repeat replays, the other body is a mismatch or (if it
// fingerprints the same) a replay. The handler must get the unquoted key
// from KeyFromContext.
func FuzzMiddleware(f *testing.F) {
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true}) // the embedded store, in memory
	if err != nil {
		f.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{SweepInterval: -1})
	f.Cleanup(func() { _ = store.Close() })
	var seq atomic.Int64

	f.Add("POST", "k1", "application/json", []byte(`{"amount":"12.50","order":"o-1"}`), []byte(`{"order":"o-1","amount":"12.50"}`), "refunds", uint8(0))
	f.Add("POST", "k1", "application/json", []byte(`{"amount":"12.50"}`), []byte(`{"amount":"99.00"}`), "refunds", uint8(flagFlush))
	f.Add("PATCH", `"quoted"`, "text/plain", []byte("plain body"), []byte("plain body "), "a/b", uint8(flagBigResponse))
	f.Add("POST", "", "application/json", []byte(`{}`), []byte(`{}`), "x", uint8(flagNoKey))
	f.Add("POST", "dup", "application/json", []byte(`{}`), []byte(`{}`), "x", uint8(flagKeyTwice))
	f.Add("POST", "k\x7f", "application/json", []byte(`{"a":{"b":[1,2,3]}}`), []byte(`{"a":1,"a":2}`), "", uint8(0))
	f.Add("GET", "k2", "", []byte(nil), []byte(nil), "search", uint8(0))
	f.Add("POST", "k3", "application/json; charset=utf-8", []byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`), []byte(`1e2`), "deep", uint8(flagServerError))
	f.Add("POST", "k4", "application/json", bytes.Repeat([]byte("x"), 5000), []byte(`{}`), "big", uint8(0))

	f.Fuzz(func(t *testing.T, method, key, contentType string, body, body2 []byte, path string, flags uint8) {
		// A scope per input keeps inputs apart in the shared store.
		scope := "fuzz-" + strconv.FormatInt(seq.Add(1), 10)
		var runs atomic.Int32
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("handler could not read the body: %v", err)
			}
			// The handler gets the key as the store holds it: valid, and
			// the header itself unless the header was quoted.
			k, ok := idemhttp.KeyFromContext(r.Context())
			keyed := r.Method == http.MethodPost || r.Method == http.MethodPatch
			raw := r.Header.Get(idemhttp.HeaderKey)
			switch {
			case ok != keyed:
				t.Errorf("%s: KeyFromContext ok=%t", r.Method, ok)
			case ok && backend.ValidateKey(k) != nil:
				t.Errorf("KeyFromContext gave an invalid key %q", k)
			case ok && !strings.HasPrefix(raw, `"`) && k != raw:
				t.Errorf("KeyFromContext %q for the bare header %q", k, raw)
			}
			n := runs.Add(1)
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Set-Cookie", "s=1")
			if flags&flagServerError != 0 && n == 1 {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(got)
			if flags&flagFlush != 0 {
				w.(http.Flusher).Flush()
			}
			if flags&flagBigResponse != 0 {
				_, _ = w.Write(bytes.Repeat([]byte("r"), 100))
			}
		})
		mw := idemhttp.Middleware(store, &idemhttp.Options{
			Scope:            func(*http.Request) (string, error) { return scope, nil },
			MaxBodyBytes:     4096,
			MaxResponseBytes: 64,
		})(handler)

		u := &url.URL{Scheme: "http", Host: "tool.example", Path: "/" + path}
		serve := func(b []byte) *httptest.ResponseRecorder {
			req, err := http.NewRequest(method, u.String(), bytes.NewReader(b))
			if err != nil {
				return nil
			}
			if contentType != "" {
				req.Header["Content-Type"] = []string{contentType}
			}
			switch {
			case flags&flagNoKey != 0:
			case flags&flagKeyTwice != 0:
				req.Header[idemhttp.HeaderKey] = []string{key, key}
			default:
				req.Header[idemhttp.HeaderKey] = []string{key}
			}
			rec := httptest.NewRecorder()
			mw.ServeHTTP(rec, req)
			checkResponse(t, rec)
			return rec
		}
		first := serve(body)
		if first == nil {
			return // a method net/http refuses
		}
		serve(body)
		serve(body2)

		if method != http.MethodPost && method != http.MethodPatch {
			return // passed through: the handler runs every time
		}
		limit := int32(1)
		if flags&flagServerError != 0 {
			limit = 2 // the 500 was released, so one more run is due
		}
		if n := runs.Load(); n > limit {
			t.Fatalf("%s key %q ran the handler %d times (first answer %d)", method, key, n, first.Code)
		}
	})
}

// checkResponse checks what every answer must be: a valid status, a
// well-formed problem for refusals, and never a saved cookie on a replay.
func checkResponse(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code < 200 || rec.Code > 599 {
		t.Fatalf("status %d", rec.Code)
	}
	if rec.Header().Get(idemhttp.HeaderReplayed) == "true" && rec.Header().Get("Set-Cookie") != "" {
		t.Fatalf("a replay carried Set-Cookie")
	}
	if rec.Header().Get("Content-Type") != idemhttp.ProblemContentType {
		return
	}
	var p idemhttp.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", rec.Body.Bytes(), err)
	}
	if p.Type == "" || p.Title == "" || p.Status != rec.Code {
		t.Fatalf("malformed problem %+v for status %d", p, rec.Code)
	}
}
