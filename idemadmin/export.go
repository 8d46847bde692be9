package idemadmin

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/keyring"
)

// ExportOptions configure Export.
type ExportOptions struct {
	// NoBodies leaves saved bodies out (AuditResult.Body stays empty;
	// BodyBytes still says how long each was).
	NoBodies bool
	// Progress, if set, is called with the number of records written so
	// far, after each record.
	Progress func(written int)
}

// AuditRecord is one line of an export: every stored field of a record,
// with names that stay stable for audit tooling.
type AuditRecord struct {
	Scope       string    `json:"scope"`
	Key         string    `json:"key"`
	State       string    `json:"state"`
	Fingerprint string    `json:"fingerprint"`
	Token       uint64    `json:"token"`
	Claims      int       `json:"claims"`
	FirstSeen   time.Time `json:"first_seen"`
	ClaimedAt   time.Time `json:"claimed_at"`
	DoneAt      time.Time `json:"done_at,omitzero"`
	LeaseEnds   time.Time `json:"lease_ends,omitzero"`
	ExpiresAt   time.Time `json:"expires_at,omitzero"`
	// RetentionSeconds is the retention the claim completes with.
	RetentionSeconds float64      `json:"retention_seconds"`
	Owner            string       `json:"owner,omitempty"`
	Checks           int          `json:"checks,omitempty"`
	NextCheck        time.Time    `json:"next_check,omitzero"`
	Attention        bool         `json:"attention,omitempty"`
	Recovered        string       `json:"recovered,omitempty"`
	Result           *AuditResult `json:"result,omitempty"`
	Attempts         []AuditClaim `json:"attempts"`

	Replays       int64     `json:"replays"`
	LastReplay    time.Time `json:"last_replay,omitzero"`
	Conflicts     int64     `json:"conflicts"`
	Mismatches    int64     `json:"mismatches"`
	LastRejection time.Time `json:"last_rejection,omitzero"`
}

// AuditResult is a saved result. Body is base64 in JSON. A sealed result
// (docs/encryption.md) is exported with SealedUnder naming its key and no
// Body: an export never opens results, and the ciphertext is not the body.
type AuditResult struct {
	Status    int                 `json:"status"`
	Header    map[string][]string `json:"header,omitempty"`
	Body      []byte              `json:"body,omitempty"`
	BodyBytes int                 `json:"body_bytes"`
	Error     string              `json:"error,omitempty"`
	Truncated bool                `json:"truncated,omitempty"`
	// SealedUnder names the key a sealed result is sealed under.
	SealedUnder string `json:"sealed_under,omitempty"`
}

// AuditClaim is one claim of a record's story (backend.Attempt).
type AuditClaim struct {
	Token     uint64    `json:"token"`
	ClaimedAt time.Time `json:"claimed_at"`
	Owner     string    `json:"owner,omitempty"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	Outcome   string    `json:"outcome,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Status    int       `json:"status,omitempty"`
}

// NewAuditRecord converts rec; with bodies false the body is left out.
func NewAuditRecord(rec *idem.Record, bodies bool) AuditRecord {
	a := AuditRecord{
		Scope: rec.Scope, Key: rec.Key, State: rec.State.String(), Fingerprint: rec.Fingerprint,
		Token: rec.Token, Claims: rec.Claims, FirstSeen: rec.FirstSeen, ClaimedAt: rec.ClaimedAt,
		DoneAt: rec.DoneAt, LeaseEnds: rec.LeaseEnds, ExpiresAt: rec.ExpiresAt, RetentionSeconds: rec.Retention.Seconds(),
		Owner: rec.Owner, Checks: rec.Checks, NextCheck: rec.NextCheck, Attention: rec.Attention,
		Recovered: rec.Recovered, Attempts: make([]AuditClaim, 0, len(rec.Attempts)),
		Replays: rec.Replays, LastReplay: rec.LastReplay, Conflicts: rec.Conflicts,
		Mismatches: rec.Mismatches, LastRejection: rec.LastRejection,
	}
	if r := rec.Result; r != nil {
		a.Result = &AuditResult{Status: r.Status, Header: r.Header, BodyBytes: len(r.Body),
			Error: r.Error, Truncated: r.Truncated}
		if id, sealed := keyring.Sealed(r); sealed {
			a.Result.BodyBytes, a.Result.SealedUnder = 0, id
		} else if bodies {
			a.Result.Body = r.Body
		}
	}
	for _, t := range rec.Attempts {
		a.Attempts = append(a.Attempts, AuditClaim{Token: t.Token, ClaimedAt: t.ClaimedAt, Owner: t.Owner,
			EndedAt: t.EndedAt, Outcome: t.Outcome, Reason: t.Reason, Status: t.Status})
	}
	return a
}

// Export writes every record of l to w as JSON lines, one AuditRecord per
// line, in the backend's order, and returns how many it wrote.
func Export(ctx context.Context, l backend.Lister, w io.Writer, o *ExportOptions) (int, error) {
	var opts ExportOptions
	if o != nil {
		opts = *o
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	n := 0
	var werr error
	err := l.Scan(ctx, func(rec *idem.Record) bool {
		if werr = enc.Encode(NewAuditRecord(rec, !opts.NoBodies)); werr != nil {
			return false
		}
		n++
		if opts.Progress != nil {
			opts.Progress(n)
		}
		return true
	})
	if werr != nil {
		return n, werr
	}
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return n, err
}
