package idemadmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem"
)

// SettleRequest is an operator's verdict on a stale claim, for Settle and
// POST /settle (as JSON, with these field names).
type SettleRequest struct {
	Scope string `json:"scope"`
	Key   string `json:"key"`
	// Committed says the effect happened: Status, Header and Body are
	// saved as the key's result and replayed. False says it did not: the
	// claim is released and the next request runs it.
	Committed bool                `json:"committed"`
	Status    int                 `json:"status,omitempty"`
	Header    map[string][]string `json:"header,omitempty"`
	Body      []byte              `json:"body,omitempty"`
	// By names who decided and Note why; both are required and kept in
	// the key's story as "BY: NOTE".
	By   string `json:"by"`
	Note string `json:"note"`
	// InClear says the body may be stored in clear in an encrypted store
	// whose Store has no keys (idem.SettleOptions.InClear); without it
	// such a settle is refused (idem.ErrKeysNeeded).
	InClear bool `json:"in_clear,omitempty"`
}

// MaxSettleBody bounds the body a settle saves (1 MiB, as
// idemhttp.DefaultMaxResponseBytes bounds what the middleware keeps):
// idem resolve -body-file, POST settle and the page's form all refuse a
// larger one.
const MaxSettleBody = 1 << 20

// maxSettleRequest bounds a settle's request: the body in base64 (JSON)
// or as a file (the page's form), and the rest.
const maxSettleRequest = MaxSettleBody*4/3 + 64<<10

// Settle applies req through idem.Store.Settle (fenced by the claim's
// token, so it cannot race a live holder) and returns the key's story
// after it, judged at now.
func Settle(ctx context.Context, s *idem.Store, req SettleRequest, now time.Time) (*Story, error) {
	switch {
	case req.By == "" || req.Note == "":
		return nil, fmt.Errorf("%w: say who decides (by) and why (note)", ErrBadSettle)
	case req.Committed && req.Status == 0:
		return nil, fmt.Errorf("%w: a committed verdict needs the result's status", ErrBadSettle)
	case !req.Committed && (req.Status != 0 || len(req.Body) > 0 || len(req.Header) > 0):
		return nil, fmt.Errorf("%w: a not-committed verdict saves no result", ErrBadSettle)
	case len(req.Body) > MaxSettleBody:
		return nil, fmt.Errorf("%w: the body has %d bytes, more than the %d a settle saves", ErrBadSettle,
			len(req.Body), MaxSettleBody)
	}
	v, res := idem.VerdictNotCommitted, idem.Result{}
	if req.Committed {
		v, res = idem.VerdictCommitted, idem.Result{Status: req.Status, Header: req.Header, Body: req.Body}
	}
	if err := s.Settle(ctx, req.Scope, req.Key, v, res, req.By+": "+req.Note,
		&idem.SettleOptions{InClear: req.InClear}); err != nil {
		return nil, err
	}
	return Inspect(ctx, s, req.Scope, req.Key, now)
}

// settle serves POST /settle: a SettleRequest as JSON in, the Story out.
func (h *handler) settle(w http.ResponseWriter, r *http.Request) {
	var req SettleRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSettleRequest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("%w: %v", ErrBadSettle, err))
		return
	}
	story, err := Settle(r.Context(), h.s, req, h.o.Now())
	if err != nil {
		writeError(w, settleStatus(err), err)
		return
	}
	respond(w, r, story)
}

// settleStatus maps Settle's errors: 409 when there is no stale claim to
// settle (or another holder took it) or the store is encrypted and the
// settle would store its result in clear, 400 for a malformed request.
func settleStatus(err error) int {
	switch {
	case errors.Is(err, ErrBadSettle):
		return http.StatusBadRequest
	case errors.Is(err, idem.ErrNothingToSettle), errors.Is(err, idem.ErrFenced), errors.Is(err, idem.ErrKeysNeeded):
		return http.StatusConflict
	}
	return statusOf(err)
}
