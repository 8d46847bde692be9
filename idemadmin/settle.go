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
}

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
	}
	v, res := idem.VerdictNotCommitted, idem.Result{}
	if req.Committed {
		v, res = idem.VerdictCommitted, idem.Result{Status: req.Status, Header: req.Header, Body: req.Body}
	}
	if err := s.Settle(ctx, req.Scope, req.Key, v, res, req.By+": "+req.Note); err != nil {
		return nil, err
	}
	rec, err := s.Get(ctx, req.Scope, req.Key)
	if err != nil {
		return nil, err
	}
	return Tell(rec, now), nil
}

// settle serves POST /settle: a SettleRequest as JSON in, the Story out.
func (h *handler) settle(w http.ResponseWriter, r *http.Request) {
	var req SettleRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
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
// settle (or another holder took it), 400 for a malformed request.
func settleStatus(err error) int {
	switch {
	case errors.Is(err, ErrBadSettle):
		return http.StatusBadRequest
	case errors.Is(err, idem.ErrNothingToSettle), errors.Is(err, idem.ErrFenced):
		return http.StatusConflict
	}
	return statusOf(err)
}
