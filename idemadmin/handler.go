package idemadmin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
)

// HandlerOptions configure Handler. Authorize is required; every other
// zero field means its documented default.
type HandlerOptions struct {
	// Authorize decides who may read the views, read saved bodies and run
	// a sweep (see Access). Required: Handler panics without it, so that
	// mounting the handler is a decision about who reaches it, not an
	// accident of routing. Authorization in front of the handler does not
	// replace it: the handler still asks, per request and per access.
	Authorize Authorizer
	// Decisions, when the server passed it in the store's Options.Observer,
	// lets POST /sweep list each decision; nil reports counts only.
	Decisions *Decisions
	// Metrics, if set, gets its gauges refreshed (SetGauges) on every
	// GET /stats.
	Metrics Metrics
	// Now is the time the views judge records at. Default the store's
	// clock.
	Now func() time.Time
	// MaxRows bounds the rows of GET /ls, whatever its limit asks, and
	// of the page's listing, across its pages. Default 1000.
	MaxRows int
	// CSRFKey signs the CSRF tokens of the page's forms. Servers behind
	// one address share a key so that each accepts the others' forms.
	// Default a random key per Handler.
	CSRFKey []byte
}

// Handler serves the views of a running server's store, as JSON, to the
// requests opts.Authorize allows (the access each needs in brackets):
//
//	GET  /inspect?scope=S&key=K   the key's Story (404 when nothing is stored) [read]
//	GET  /ls?state=&scope=&older_than=&limit=   a Listing (limit default 100) [read]
//	GET  /stats                   Stats; refreshes Metrics' gauges [read]
//	POST /sweep                   runs a sweep now: a SweepResult [sweep]
//	POST /settle                  settles a stale claim (a SettleRequest): its Story [settle];
//	                              409 when the key holds no stale claim
//	GET  /export?bodies=false     every record as JSON lines (AuditRecord) [read]
//	GET  /export?bodies=true      the same with saved bodies [read, bodies]
//	GET  /backup                  a backup file of the whole store (Store.Backup) [bodies, backup];
//	                              501 when the backend cannot back itself up
//
// Beside the JSON, it serves the operator's page, as HTML:
//
//	GET  /ui/                     the records, stuck and needing attention first;
//	                              filters state=, scope=, older_than=; page= [read]
//	GET  /ui/key?scope=S&key=K    a key's timeline, its saved result (the body
//	                              only with bodies access) and a form to settle it [read]
//	GET  /ui/stats                Stats, free space, a chart of the last 24 hours [read]
//	POST /ui/settle               the settle form: 303 to the key's timeline [settle]
//	POST /ui/sweep                the sweep form: what the sweep decided [sweep]
//
// GET / redirects a browser (Accept: text/html) to ui/. The page runs no
// script; its forms carry a CSRF token bound to a cookie it sets, and
// every cross-origin POST is refused (http.CrossOriginProtection), the
// JSON ones too.
//
// Paths are relative to where it is mounted (use http.StripPrefix). Add
// format=text to inspect, ls, stats or sweep for the command line's
// tables. Errors are JSON objects {"error": "..."} with a 4xx or 5xx
// status: 401 or 403 when the Authorizer refuses; ls, stats and export
// answer 501 when the backend cannot list (backend.Lister). A scan stops when
// the request's context ends. Handler panics if opts or opts.Authorize is
// nil.
func Handler(store *idem.Store, opts *HandlerOptions) http.Handler {
	if opts == nil || opts.Authorize == nil {
		panic("idemadmin: Handler needs HandlerOptions.Authorize: it shows keys, fingerprints and (when " +
			"asked) saved bodies, and POST sweep asks the resolver and writes; say who may do which")
	}
	h := &handler{s: store, o: *opts, maxRows: 1000, csrf: newCSRF(opts.CSRFKey)}
	if opts.MaxRows > 0 {
		h.maxRows = opts.MaxRows
	}
	if h.o.Now == nil {
		h.o.Now = store.Options().Clock.Now
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.guard(AccessRead, h.index))
	mux.HandleFunc("GET /inspect", h.guard(AccessRead, h.inspect))
	mux.HandleFunc("GET /ls", h.guard(AccessRead, h.ls))
	mux.HandleFunc("GET /stats", h.guard(AccessRead, h.stats))
	mux.HandleFunc("POST /sweep", h.guard(AccessSweep, h.sweep))
	mux.HandleFunc("POST /settle", h.guard(AccessSettle, h.settle))
	mux.HandleFunc("GET /export", h.guard(AccessRead, h.export))
	mux.HandleFunc("GET /backup", h.guard(AccessBodies, h.backup))
	h.registerPage(mux)
	// A form on another site can post to a mounted handler with the
	// operator's cookies: refuse cross-origin writes, whatever the
	// Authorizer says. Clients that are not browsers send neither
	// Sec-Fetch-Site nor Origin, and pass.
	return http.NewCrossOriginProtection().Handler(mux)
}

type handler struct {
	s       *idem.Store
	o       HandlerOptions
	maxRows int
	csrf    *csrf
}

func (h *handler) index(w http.ResponseWriter, r *http.Request) {
	if wantsHTML(r) {
		// Relative, so that it works wherever the handler is mounted.
		w.Header().Set("Location", "ui/")
		w.WriteHeader(http.StatusSeeOther)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]string{"endpoints": {
		"GET inspect?scope=&key=", "GET ls?state=&scope=&older_than=&limit=", "GET stats",
		"POST sweep", "GET export?bodies=false", "GET export?bodies=true", "GET backup",
		"GET ui/ (the operator's page, HTML)",
	}})
}

func (h *handler) lister(w http.ResponseWriter) (backend.Lister, bool) {
	l, ok := h.s.Backend().(backend.Lister)
	if !ok {
		writeError(w, http.StatusNotImplemented, fmt.Errorf("the store's backend %T cannot list records", h.s.Backend()))
	}
	return l, ok
}

func (h *handler) inspect(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	story, err := Inspect(r.Context(), h.s, q.Get("scope"), q.Get("key"), h.o.Now())
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	respond(w, r, story)
}

func (h *handler) ls(w http.ResponseWriter, r *http.Request) {
	l, ok := h.lister(w)
	if !ok {
		return
	}
	q := r.URL.Query()
	f := Filter{Now: h.o.Now(), State: q.Get("state"), Limit: min(100, h.maxRows), Approximate: h.s.CountsApproximate}
	if q.Has("scope") {
		scope := q.Get("scope")
		f.Scope = &scope
	}
	if s := q.Get("older_than"); s != "" {
		d, err := ParseAge(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		f.MinAge = d
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, fmt.Errorf("limit %q: want a positive number", s))
			return
		}
		f.Limit = min(n, h.maxRows)
	}
	if err := f.Check(); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	out, err := List(r.Context(), l, f)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	respond(w, r, out)
}

func (h *handler) stats(w http.ResponseWriter, r *http.Request) {
	l, ok := h.lister(w)
	if !ok {
		return
	}
	st, err := Collect(r.Context(), l, StatsOptions{Now: h.o.Now()})
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	if h.o.Metrics != nil {
		SetGauges(h.o.Metrics, st)
	}
	respond(w, r, st)
}

func (h *handler) sweep(w http.ResponseWriter, r *http.Request) {
	res, err := Sweep(r.Context(), h.s, h.o.Decisions)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	respond(w, r, res)
}

func (h *handler) export(w http.ResponseWriter, r *http.Request) {
	l, ok := h.lister(w)
	if !ok {
		return
	}
	// Bodies are what tools answered their callers: only when asked, and
	// only for those allowed to read them.
	bodies := false
	if s := r.URL.Query().Get("bodies"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("bodies %q: want true or false", s))
			return
		}
		bodies = b
	}
	if bodies && !h.allowed(w, r, AccessBodies) {
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	// Once lines are sent the status is too: a failure midway can only
	// cut the stream short, which a reader sees as a last line without
	// its newline or a missing record count.
	n, err := Export(r.Context(), l, w, &ExportOptions{NoBodies: !bodies})
	if err != nil && n == 0 {
		w.Header().Set("Content-Type", "application/json")
		writeError(w, statusOf(err), err)
	}
}

// textView is a view that prints itself for a terminal.
type textView interface {
	WriteText(w io.Writer) error
}

// respond writes v as JSON, or as text with format=text.
func respond(w http.ResponseWriter, r *http.Request, v textView) {
	if r.URL.Query().Get("format") == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_ = v.WriteText(w)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

// statusOf maps an error of the store to an HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, idem.ErrInvalidKey):
		return http.StatusBadRequest
	case errors.Is(err, idem.ErrUnavailable), errors.Is(err, idem.ErrClosed):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// ParseAge parses an age such as "90s", "15m", "2h30m" (Go durations) or
// "7d" (days).
func ParseAge(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("idemadmin: age %q: want a duration such as 90s, 15m, 2h or 7d", s)
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("idemadmin: age %q: want a duration such as 90s, 15m, 2h or 7d", s)
	}
	return d, nil
}
