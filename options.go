package idem

import (
	"errors"
	"fmt"
	"time"
)

// minLease is the shortest lease: Do's heartbeat extends it every Lease/3.
const minLease = time.Millisecond

// Validate reports the options that make no sense, defaults filled in: a
// negative duration or count where zero means the default, a lease shorter
// than a millisecond, a Retention shorter than the Lease (a retry after
// a lease ran out would find the record gone and run the effect again), a
// SweepInterval longer than the Retention (expired records would outlive
// it by more than it), and a Durability that is neither Durable nor Fast.
// It returns nil or an error joining one *OptionsError per field, which
// matches ErrInvalidOptions. Open calls it; New panics with its error, as
// a constructor does on bad configuration, so call it first when the
// options come from a configuration file.
func (o *Options) Validate() error {
	if o == nil {
		return nil
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &OptionsError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"Retention", o.Retention}, {"Lease", o.Lease}, {"RecheckBackoff", o.RecheckBackoff},
		{"CloseTimeout", o.CloseTimeout}} {
		if d.v < 0 {
			bad(d.field, "negative (%s); zero means the default", d.v)
		}
	}
	if o.MaxUnknown < 0 {
		bad("MaxUnknown", "negative (%d); zero means the default", o.MaxUnknown)
	}
	if o.Lease > 0 && o.Lease < minLease {
		bad("Lease", "%s is shorter than %s (the heartbeat extends it every Lease/3)", o.Lease, minLease)
	}
	if o.Durability != Durable && o.Durability != Fast {
		bad("Durability", "unknown value %d", o.Durability)
	}
	if errs != nil {
		// The relations below compare defaults filled in; a negative
		// field would only repeat itself there.
		return errors.Join(errs...)
	}
	c := o.withDefaults()
	if c.Retention < c.Lease {
		bad("Retention", "%s is shorter than Lease (%s): a retry after the lease ran out would find the "+
			"record gone and run the effect again", c.Retention, c.Lease)
	}
	if c.SweepInterval > c.Retention {
		bad("SweepInterval", "%s is longer than Retention (%s)", c.SweepInterval, c.Retention)
	}
	return errors.Join(errs...)
}
