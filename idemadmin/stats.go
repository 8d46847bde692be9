package idemadmin

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
)

// Stats are counts over every record of a store, as of Now.
type Stats struct {
	Now time.Time `json:"now"`
	// Records counts every stored record; InProgress, Done and Released
	// count them by state.
	Records    int `json:"records"`
	InProgress int `json:"in_progress"`
	Done       int `json:"done"`
	Released   int `json:"released"`
	// Stuck counts claims whose lease ended, awaiting recovery; Attention
	// those recovery gave up on; Expired done and released records past
	// their expiry, not reclaimed yet.
	Stuck     int `json:"stuck"`
	Attention int `json:"attention"`
	Expired   int `json:"expired"`
	// OldestOpen is the claim in progress claimed earliest, if any.
	OldestOpen *Row `json:"oldest_open,omitempty"`
	// ExpiryHorizon is the latest expiry of any record: by then, with no
	// new traffic, every record has expired.
	ExpiryHorizon time.Time `json:"expiry_horizon,omitzero"`
	// Replays, Conflicts and Mismatches add up the records' counts.
	Replays    int64 `json:"replays"`
	Conflicts  int64 `json:"conflicts"`
	Mismatches int64 `json:"mismatches"`
	// Disk is the space the store takes, when the backend can tell.
	Disk *Disk `json:"disk,omitempty"`
}

// Disk is the space a Badger store takes on disk, measured from its files
// when Collect runs: the blocks allocated to them where the system tells
// (an open store's logs are sparse, preallocated files), their sizes
// elsewhere.
type Disk struct {
	// LSM sums the tables (.sst), VLog the value logs (.vlog), Log idem's
	// own log (idem.wal), and Total every file of the directory, memtable
	// logs and manifest included.
	LSM   int64 `json:"lsm_bytes"`
	VLog  int64 `json:"vlog_bytes"`
	Log   int64 `json:"log_bytes"`
	Total int64 `json:"total_bytes"`
	// Free is what the store's file system has free, when it can be
	// measured; Reserve is the free space below which the store refuses
	// new claims (ErrUnavailable) so that what is under way can finish.
	Free    *int64 `json:"free_bytes,omitempty"`
	Reserve int64  `json:"reserve_bytes,omitempty"`
}

// StatsOptions configure Collect.
type StatsOptions struct {
	// Now is the time records are judged at.
	Now time.Time
	// Progress, if set, is called with the number of records scanned so
	// far, after each record.
	Progress func(scanned int)
}

// diskUser is implemented by the Badger backend, and by wrappers that
// embed it.
type diskUser interface {
	DiskUsage() (badgerstore.DiskUsage, error)
}

// Collect scans every record of l and counts them. When l is the Badger
// backend on disk (anything with its DiskUsage method), Stats.Disk holds
// its size on disk.
func Collect(ctx context.Context, l backend.Lister, o StatsOptions) (*Stats, error) {
	return collect(ctx, l, o, nil)
}

// collect is Collect, showing each record to visit too (if not nil), so
// that the HTML page draws its activity chart from the same scan.
func collect(ctx context.Context, l backend.Lister, o StatsOptions, visit func(*idem.Record)) (*Stats, error) {
	st := &Stats{Now: o.Now}
	var oldest Row
	err := l.Scan(ctx, func(rec *idem.Record) bool {
		st.Records++
		if visit != nil {
			visit(rec)
		}
		if o.Progress != nil {
			o.Progress(st.Records)
		}
		switch rec.State {
		case idem.StateInProgress:
			st.InProgress++
			if st.OldestOpen == nil || rec.ClaimedAt.Before(oldest.Since) {
				oldest = NewRow(rec, o.Now)
				st.OldestOpen = &oldest
			}
		case idem.StateDone:
			st.Done++
		case idem.StateReleased:
			st.Released++
		}
		switch condition(rec, o.Now) {
		case "stuck":
			st.Stuck++
		case "attention":
			st.Attention++
		case "expired":
			st.Expired++
		}
		if rec.State != idem.StateInProgress && rec.ExpiresAt.After(st.ExpiryHorizon) {
			st.ExpiryHorizon = rec.ExpiresAt
		}
		st.Replays += rec.Replays
		st.Conflicts += rec.Conflicts
		st.Mismatches += rec.Mismatches
		return true
	})
	if err != nil {
		return nil, err
	}
	if b, ok := l.(diskUser); ok {
		u, err := b.DiskUsage()
		if err != nil {
			return nil, fmt.Errorf("idemadmin: measure disk: %w", err)
		}
		if u.Total > 0 { // zero: an in-memory store
			st.Disk = &Disk{LSM: u.LSM, VLog: u.VLog, Log: u.Log, Total: u.Total, Reserve: u.Reserve}
			if u.Free >= 0 {
				st.Disk.Free = &u.Free
			}
		}
	}
	return st, nil
}

// WriteText prints the stats as an aligned table.
func (s *Stats) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	p := func(label, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", label, fmt.Sprintf(format, args...))
	}
	p("records", "%d", s.Records)
	p("  in progress", "%d (%d stuck, %d need attention)", s.InProgress, s.Stuck, s.Attention)
	p("  done", "%d", s.Done)
	p("  released", "%d", s.Released)
	p("  expired", "%d (reclaimed by the next sweep)", s.Expired)
	if o := s.OldestOpen; o != nil {
		p("oldest open claim", "%s %s, claimed %s (%s ago, %s)", quote(o.Scope), quote(o.Key),
			formatTime(o.Since), formatAge(o.Age), o.Condition)
	} else {
		p("oldest open claim", "none")
	}
	if !s.ExpiryHorizon.IsZero() {
		p("expiry horizon", "%s (%s)", formatTime(s.ExpiryHorizon), relative(s.ExpiryHorizon, s.Now))
	} else {
		p("expiry horizon", "-")
	}
	p("replays", "%d", s.Replays)
	p("rejected", "%d× 409, %d× 422", s.Conflicts, s.Mismatches)
	if s.Disk != nil {
		// Name every part, so that they add up to the total: the rest is
		// the memtables and the manifest.
		d := s.Disk
		p("disk", "%s (tables %s, value log %s, idem.wal %s, memtables and manifest %s)", formatBytes(d.Total),
			formatBytes(d.LSM), formatBytes(d.VLog), formatBytes(d.Log), formatBytes(max(d.Total-d.LSM-d.VLog-d.Log, 0)))
		if d.Free != nil {
			p("free space", "%s (new claims refused below %s)", formatBytes(*d.Free), formatBytes(d.Reserve))
		}
	}
	return tw.Flush()
}
