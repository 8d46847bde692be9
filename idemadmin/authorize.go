package idemadmin

import (
	"errors"
	"net/http"
)

// Access is what a request to Handler asks to do, for its Authorizer.
type Access int

const (
	// AccessRead reads the views: GET /, inspect, ls, stats, export
	// without bodies, and the page's ui/ views. They show scopes (often tenant names), keys,
	// fingerprints, states, counts, times and saved error texts.
	AccessRead Access = iota + 1
	// AccessBodies reads saved response bodies: GET export?bodies=true,
	// and the body on a key's page (asked there without refusing the page:
	// without it the page says the body is hidden).
	// A body is what a tool answered a caller, with that caller's data.
	AccessBodies
	// AccessSweep runs a sweep now: POST sweep, or the page's sweep form
	// (POST ui/sweep). It asks the store's
	// Resolver about every stale claim, saves or releases claims on its
	// verdicts, reclaims expired records, and lists what it decided.
	AccessSweep
	// AccessSettle settles a stale claim by an operator's verdict: POST
	// settle, or the settle form of a key's page (POST ui/settle). It saves a result that every repeat replays, or releases the
	// claim so that the next request runs the effect again.
	AccessSettle
	// AccessBackup downloads a backup of the whole store: GET backup. It
	// holds every record with its saved body, so the request asks for
	// AccessBodies first.
	AccessBackup
)

// String names the access: "read", "bodies", "sweep", "settle" or
// "backup".
func (a Access) String() string {
	switch a {
	case AccessRead:
		return "read"
	case AccessBodies:
		return "bodies"
	case AccessSweep:
		return "sweep"
	case AccessSettle:
		return "settle"
	case AccessBackup:
		return "backup"
	}
	return "access(?)"
}

// Authorizer decides whether r may have access a. It returns nil to allow
// it and an error to refuse it: 401 if the error wraps ErrUnauthenticated,
// 403 otherwise. The error's text is not sent; log it in the Authorizer if
// it matters. An export with bodies asks for AccessRead, then AccessBodies;
// a backup for AccessBodies, then AccessBackup. A page also asks for
// AccessSweep and AccessSettle to decide which forms it shows.
type Authorizer func(r *http.Request, a Access) error

// guard runs next if the Authorizer allows access a, and refuses otherwise.
func (h *handler) guard(a Access, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.allowed(w, r, a) {
			next(w, r)
		}
	}
}

// allowed asks the Authorizer and answers a refusal itself, as JSON.
func (h *handler) allowed(w http.ResponseWriter, r *http.Request, a Access) bool {
	status, msg := h.decide(r, a)
	if status != 0 {
		writeError(w, status, errors.New(msg))
	}
	return status == 0
}

// decide asks the Authorizer for access a and returns 0, or the status and
// message of a refusal. The Authorizer's own error text is not sent.
func (h *handler) decide(r *http.Request, a Access) (int, string) {
	err := h.o.Authorize(r, a)
	switch {
	case err == nil:
		return 0, ""
	case errors.Is(err, ErrUnauthenticated):
		return http.StatusUnauthorized, "not authenticated"
	}
	return http.StatusForbidden, "forbidden: this request needs " + a.String() + " access"
}
