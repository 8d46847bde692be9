package backend

import (
	"context"
	"fmt"
)

// Verifier is a Backend that can check everything it stores: the embedded
// Badger backend does.
type Verifier interface {
	// Verify reads every record and checks it, and the backend's other
	// structures, and reports the damage found. Its error is for a check
	// that could not run, not for damage.
	Verify(ctx context.Context) (*VerifyReport, error)
}

// VerifyReport is what Verify found.
type VerifyReport struct {
	// Records is the number of records read, damaged ones included.
	Records int `json:"records"`
	// Expiries is the number of expiry index entries read.
	Expiries int `json:"expiries"`
	// Damage lists what failed a check; empty when all is well.
	Damage []Damage `json:"damage"`
}

// OK reports whether Verify found no damage.
func (r *VerifyReport) OK() bool { return len(r.Damage) == 0 }

// Damage is one thing Verify found damaged.
type Damage struct {
	// Part is what is damaged: "record", "expiry index", "tables" or "log".
	Part string `json:"part"`
	// Scope and Key name the record, for a record or its expiry entry.
	Scope string `json:"scope,omitempty"`
	Key   string `json:"key,omitempty"`
	// Problem says what is wrong.
	Problem string `json:"problem"`
}

// String describes d on one line.
func (d Damage) String() string {
	if d.Part == "record" || d.Part == "expiry index" {
		return fmt.Sprintf("%s of scope %q, key %q: %s", d.Part, d.Scope, d.Key, d.Problem)
	}
	return d.Part + ": " + d.Problem
}
