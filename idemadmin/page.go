package idemadmin

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
)

// The operator's page: the same views as the JSON, server-rendered with
// html/template, which escapes every stored value (keys, scopes, notes and
// bodies come from callers) for the context it lands in. The page runs no
// script at all, and its Content-Security-Policy says so: what escaping
// might miss, the browser still refuses to run. Forms are POST only and
// carry a CSRF token (csrf.go).

//go:embed page/*.html page/style.css
var pageFiles embed.FS

// pageTemplate is parsed once; executions only read it.
var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"time":   formatTime,
	"ago":    relative,
	"age":    formatAge,
	"claims": func(n int) string { return plural(int64(n), "claim", "claims") },
	"bytes": func(n any) string {
		switch n := n.(type) {
		case int:
			return formatBytes(int64(n))
		case int64:
			return formatBytes(n)
		case *int64:
			return formatBytes(*n)
		}
		return fmt.Sprint(n)
	},
}).ParseFS(pageFiles, "page/*.html"))

// pageStyle is the page's style sheet, served at ui/style.css.
var pageStyle, _ = pageFiles.ReadFile("page/style.css")

// perPage is how many rows a page of the listing shows.
const perPage = 50

// setSecurityHeaders sets the headers of every page: no script runs,
// nothing loads from elsewhere, forms post only here, and no site may
// frame the page (which would let it trick a click on Settle).
func setSecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "+
		"frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

// pageData is what the template renders: the frame, and one view.
type pageData struct {
	Title string
	CSRF  string
	Now   time.Time
	// CanSweep and CanSettle say whether the Authorizer grants them, so
	// that the page shows only the forms that would be accepted.
	CanSweep, CanSettle bool

	List  *listPage
	Key   *keyPage
	Stats *statsPage
	Sweep *SweepResult
	// Error is shown instead of a view, with Back as a link.
	Error, Back string
}

type listPage struct {
	*Listing
	States              []string
	State, Scope, Older string
	Page, Pages         int
	First               int // the 1-based number of the first row shown
	Prev, Next          string
	// Capped says more records match than the pages show: the first
	// MaxRows of the handler.
	Capped  bool
	MaxRows int
}

// MaxBody is the largest body the settle form saves.
func (*pageData) MaxBody() int { return MaxSettleBody }

type keyPage struct {
	*Story
	Settleable bool
	// Bodies says whether the Authorizer grants bodies; Body and Header
	// are filled only then.
	Bodies  bool
	Header  map[string][]string
	Body    string
	Binary  bool // the body is not UTF-8 text: shown as its length only
	Settled bool
}

type statsPage struct {
	*Stats
	Chart chart
}

// registerPage adds the page's routes to mux.
func (h *handler) registerPage(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui/{$}", h.page(AccessRead, h.listPage))
	mux.HandleFunc("GET /ui/key", h.page(AccessRead, h.keyPage))
	mux.HandleFunc("GET /ui/stats", h.page(AccessRead, h.statsPage))
	mux.HandleFunc("POST /ui/settle", h.page(AccessSettle, h.settlePage))
	mux.HandleFunc("POST /ui/sweep", h.page(AccessSweep, h.sweepPage))
	mux.HandleFunc("GET /ui/style.css", h.guard(AccessRead, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(pageStyle)
	}))
}

// page runs next if the Authorizer grants access a, with the security
// headers set, and for a POST only with the form's CSRF token; it answers
// a refusal as a page.
func (h *handler) page(a Access, next func(w http.ResponseWriter, r *http.Request, d *pageData)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		setSecurityHeaders(w.Header())
		d := &pageData{Now: h.o.Now()}
		if status, msg := h.decide(r, a); status != 0 {
			h.fail(w, d, status, msg, "./")
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxSettleRequest)
			if err := parseForm(r); err != nil {
				h.fail(w, d, http.StatusBadRequest, "malformed form: "+err.Error(), "./")
				return
			}
			if !h.csrf.check(r) {
				h.fail(w, d, http.StatusForbidden, "the form's CSRF token is missing or does not match this "+
					"browser's: reload the page and submit the form again", "./")
				return
			}
		}
		d.CSRF = h.csrf.token(w, r)
		d.CanSweep = h.o.Authorize(r, AccessSweep) == nil
		d.CanSettle = h.o.Authorize(r, AccessSettle) == nil
		next(w, r, d)
	}
}

// render writes the page with status.
func (h *handler) render(w http.ResponseWriter, status int, d *pageData) {
	var buf bytes.Buffer
	if err := pageTemplate.ExecuteTemplate(&buf, "page.html", d); err != nil {
		http.Error(w, "idemadmin: render the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders msg as the page, with a link back to back.
func (h *handler) fail(w http.ResponseWriter, d *pageData, status int, msg, back string) {
	d.Title, d.Error, d.Back = http.StatusText(status), msg, back
	h.render(w, status, d)
}

// listPage serves the listing: filters by state, scope (empty: all) and
// age (older_than), in pages of perPage rows.
func (h *handler) listPage(w http.ResponseWriter, r *http.Request, d *pageData) {
	lister, ok := h.s.Backend().(backend.Lister)
	if !ok {
		h.fail(w, d, http.StatusNotImplemented, fmt.Sprintf("the store's backend %T cannot list records", h.s.Backend()), "stats")
		return
	}
	q := r.URL.Query()
	p := &listPage{States: conditions, State: q.Get("state"), Scope: q.Get("scope"), Older: q.Get("older_than"), Page: 1}
	f := Filter{Now: d.Now, State: p.State, Approximate: h.s.CountsApproximate}
	if p.Scope != "" {
		f.Scope = &p.Scope
	}
	if p.Older != "" {
		age, err := ParseAge(p.Older)
		if err != nil {
			h.fail(w, d, http.StatusBadRequest, err.Error(), "./")
			return
		}
		f.MinAge = age
	}
	if s := q.Get("page"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			h.fail(w, d, http.StatusBadRequest, fmt.Sprintf("page %q: want a positive number", s), "./")
			return
		}
		p.Page = n
	}
	// A page is the tail of a listing as long as every page up to it: the
	// handler's MaxRows bounds the whole, as it bounds GET /ls.
	offset := (p.Page - 1) * perPage
	if offset >= h.maxRows {
		h.fail(w, d, http.StatusBadRequest, fmt.Sprintf("page %d is past the %d rows a listing shows: narrow the filters", p.Page, h.maxRows), "./")
		return
	}
	f.Limit = min(offset+perPage, h.maxRows)
	if err := f.Check(); err != nil {
		h.fail(w, d, http.StatusBadRequest, err.Error(), "./")
		return
	}
	out, err := List(r.Context(), lister, f)
	if err != nil {
		h.fail(w, d, statusOf(err), err.Error(), "./")
		return
	}
	shown := min(out.Matched, h.maxRows)
	p.Capped, p.MaxRows = out.Matched > h.maxRows, h.maxRows
	p.Pages = max((shown+perPage-1)/perPage, 1)
	out.Rows = out.Rows[min(offset, len(out.Rows)):]
	p.Listing, p.First = out, offset+1
	link := func(page int) string {
		v := url.Values{}
		for _, kv := range [][2]string{{"state", p.State}, {"scope", p.Scope}, {"older_than", p.Older}} {
			if kv[1] != "" {
				v.Set(kv[0], kv[1])
			}
		}
		if page > 1 {
			v.Set("page", strconv.Itoa(page))
		}
		return "./?" + v.Encode()
	}
	if p.Page > 1 {
		p.Prev = link(p.Page - 1)
	}
	if p.Page < p.Pages {
		p.Next = link(p.Page + 1)
	}
	d.Title, d.List = "Records", p
	h.render(w, http.StatusOK, d)
}

// keyPage serves a key's story, with its saved result (the body only with
// bodies access) and, for a stale claim, the form that settles it.
func (h *handler) keyPage(w http.ResponseWriter, r *http.Request, d *pageData) {
	q := r.URL.Query()
	rec, sealedUnder, err := h.s.Inspect(r.Context(), q.Get("scope"), q.Get("key"))
	if err != nil {
		h.fail(w, d, statusOf(err), err.Error(), "./")
		return
	}
	p := &keyPage{Story: tell(rec, sealedUnder, d.Now, h.s.CountsApproximate(rec)), Settled: q.Get("settled") != ""}
	p.Settleable = p.Condition == "stuck" || p.Condition == "attention"
	// Asked only here, where a body would be shown: a refusal hides it.
	p.Bodies = h.o.Authorize(r, AccessBodies) == nil
	if p.Bodies && rec.State == idem.StateDone && rec.Result != nil && sealedUnder == "" {
		p.Header = rec.Result.Header
		p.Body, p.Binary = bodyText(rec.Result.Body)
		p.Binary = !p.Binary
	}
	d.Title, d.Key = "Key "+rec.Key, p
	h.render(w, http.StatusOK, d)
}

// settlePage applies a settle form, then shows the key's story.
func (h *handler) settlePage(w http.ResponseWriter, r *http.Request, d *pageData) {
	f := r.PostForm
	req := SettleRequest{Scope: f.Get("scope"), Key: f.Get("key"), By: strings.TrimSpace(f.Get("by")),
		Note: strings.TrimSpace(f.Get("note"))}
	back := "key?" + url.Values{"scope": {req.Scope}, "key": {req.Key}}.Encode()
	switch f.Get("verdict") {
	case "committed":
		req.Committed = true
		n, err := strconv.Atoi(f.Get("status"))
		if err != nil || n < 100 || n > 999 {
			h.fail(w, d, http.StatusBadRequest, fmt.Sprintf("status %q: a committed verdict needs the result's HTTP status", f.Get("status")), back)
			return
		}
		body, err := formBody(r)
		if err != nil {
			h.fail(w, d, http.StatusBadRequest, err.Error(), back)
			return
		}
		req.Status, req.Body, req.InClear = n, body, f.Get("in_clear") != ""
		if ct := strings.TrimSpace(f.Get("content_type")); ct != "" {
			req.Header = map[string][]string{"Content-Type": {ct}}
		}
	case "not_committed":
	default:
		h.fail(w, d, http.StatusBadRequest, "choose a verdict: committed or not committed", back)
		return
	}
	if _, err := Settle(r.Context(), h.s, req, d.Now); err != nil {
		h.fail(w, d, settleStatus(err), err.Error(), back)
		return
	}
	// Post, redirect, get: a reload shows the story, it does not post again.
	// The location is relative, so that it works wherever the handler is
	// mounted.
	w.Header().Set("Location", back+"&settled=1")
	w.WriteHeader(http.StatusSeeOther)
}

// sweepPage runs a sweep and shows what it decided.
func (h *handler) sweepPage(w http.ResponseWriter, r *http.Request, d *pageData) {
	res, err := Sweep(r.Context(), h.s, h.o.Decisions)
	if err != nil {
		h.fail(w, d, statusOf(err), err.Error(), "./")
		return
	}
	d.Title, d.Sweep = "Sweep", res
	h.render(w, http.StatusOK, d)
}

// statsPage serves the stats, free space and a chart of recent activity.
func (h *handler) statsPage(w http.ResponseWriter, r *http.Request, d *pageData) {
	lister, ok := h.s.Backend().(backend.Lister)
	if !ok {
		h.fail(w, d, http.StatusNotImplemented, fmt.Sprintf("the store's backend %T cannot list records", h.s.Backend()), "./")
		return
	}
	act := newActivity(d.Now)
	st, err := collect(r.Context(), lister, StatsOptions{Now: d.Now}, act.add)
	if err != nil {
		h.fail(w, d, statusOf(err), err.Error(), "./")
		return
	}
	if h.o.Metrics != nil {
		SetGauges(h.o.Metrics, st)
	}
	d.Title, d.Stats = "Stats", &statsPage{Stats: st, Chart: act.chart()}
	h.render(w, http.StatusOK, d)
}

// parseForm parses a POSTed form, URL-encoded or multipart (the settle
// form's file), holding a multipart form in memory: the request's size is
// bounded before.
func parseForm(r *http.Request) error {
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		return r.ParseMultipartForm(maxSettleRequest)
	}
	return r.ParseForm()
}

// formBody returns the body the settle form gives: the file uploaded
// (body_file), which may be binary, or the text field (body); not both.
func formBody(r *http.Request) ([]byte, error) {
	text := r.PostForm.Get("body")
	if r.MultipartForm == nil || len(r.MultipartForm.File["body_file"]) == 0 {
		return []byte(text), nil
	}
	fh := r.MultipartForm.File["body_file"][0]
	if fh.Size == 0 && fh.Filename == "" {
		return []byte(text), nil // no file chosen
	}
	if text != "" {
		return nil, errors.New("give the body as text or as a file, not both")
	}
	if fh.Size > MaxSettleBody {
		return nil, fmt.Errorf("the file %q has %d bytes, more than the %d a settle saves", fh.Filename, fh.Size, MaxSettleBody)
	}
	f, err := fh.Open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, MaxSettleBody+1))
}

// bodyText returns body as text for the page, or false when it is not
// UTF-8 text.
func bodyText(body []byte) (string, bool) {
	if !utf8.Valid(body) {
		return "", false
	}
	return string(body), true
}

// wantsHTML reports whether r comes from a browser asking for a page.
func wantsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}
