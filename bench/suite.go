package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

// Suite runs the workloads against the contenders and collects Results.
type Suite struct {
	plan       Plan
	servers    *Servers
	contenders []Contender
	// workloads, when not empty, limits the run to these workload groups
	// ("cycle", "txeffect", "replay", "replay-disk", "hot", "dataset", "sustained",
	// "fingerprint", "http", "proxy").
	workloads []string
	tmp       string // every namespace directory lives under it
	logf      func(format string, args ...any)
	res       *Results
}

// naError marks a workload that does not apply to a contender.
type naError string

func (e naError) Error() string { return string(e) }

// newSeed returns a random seed for a run's keys, so that runs never
// reuse each other's keys on a shared server.
func newSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// allContenders returns every contender in report order: idem first, the
// peers, the physical limit last.
func allContenders(srv *Servers) []Contender {
	var cs []Contender
	cs = append(cs, idemContenders()...)
	cs = append(cs, idemPostgresContender(srv))
	cs = append(cs, idemRedisContender(srv))
	cs = append(cs, sqliteContenders()...)
	cs = append(cs, bboltContenders()...)
	cs = append(cs, memoryContender())
	cs = append(cs, pgxContender(srv), pgxWritesContender(srv))
	cs = append(cs, redisContenders(srv)...)
	cs = append(cs, fsyncContender(), directContender(), twoWritesContender())
	return cs
}

// wants reports whether the workload group is to run.
func (s *Suite) wants(group string) bool {
	return len(s.workloads) == 0 || slices.Contains(s.workloads, group)
}

// Run runs every workload.
func (s *Suite) Run(ctx context.Context) error {
	for _, c := range s.contenders {
		s.res.Contenders = append(s.res.Contenders, ContenderInfo{Name: c.Name, Kind: c.Kind, Durable: c.Durable,
			Config: c.Config, Skip: c.Skip})
	}
	steps := []struct {
		group string
		fn    func(context.Context) error
	}{
		{"cycle", s.cycles},
		{"txeffect", s.txEffects},
		{"replay", s.replays},
		{"replay-disk", s.diskReplays},
		{"hot", s.hotKeys},
		{"dataset", s.datasets},
		{"sustained", s.sustained},
		{"fingerprint", s.fingerprints},
		{"http", s.httpReplays},
		{"proxy", s.proxyCalls},
		{"proxy", s.proxyMCPCalls},
	}
	for _, st := range steps {
		if !s.wants(st.group) {
			continue
		}
		start := time.Now()
		if err := st.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", st.group, err)
		}
		s.logf("%s workloads done in %.1fs", st.group, time.Since(start).Seconds())
	}
	return ctx.Err()
}

// addWorkload declares a workload in the results.
func (s *Suite) addWorkload(w Workload) {
	if s.res.workload(w.ID) == nil {
		s.res.Workloads = append(s.res.Workloads, w)
	}
}

// measurement returns the measurement of a contender in a workload,
// creating it.
func (s *Suite) measurement(workload, contender string) *Measurement {
	if m := s.res.find(workload, contender); m != nil {
		return m
	}
	m := &Measurement{Workload: workload, Contender: contender}
	s.res.Measurements = append(s.res.Measurements, m)
	return m
}

// add records one repetition's figure, or why there is none. Only the
// first failure of a contender in a workload is kept.
func (s *Suite) add(workload, contender string, v float64, detail map[string]any, err error) {
	if errors.Is(err, context.Canceled) {
		return // the run is being stopped: nothing to record
	}
	m := s.measurement(workload, contender)
	var na naError
	switch {
	case m.Status != "":
		return
	case errors.As(err, &na):
		m.Status = "n/a: " + na.Error()
		return
	case err != nil:
		m.Status = "error: " + err.Error()
		s.logf("  %s / %s: %v", workload, contender, err)
		return
	}
	m.Reps = append(m.Reps, v)
	m.Median = median(m.Reps)
	if detail != nil {
		if m.Detail == nil {
			m.Detail = map[string]any{}
		}
		per, _ := m.Detail["per_rep"].([]map[string]any)
		m.Detail["per_rep"] = append(per, detail)
	}
}

// skip records that a contender is not run, for every given workload.
func (s *Suite) skip(c Contender, workloads ...string) bool {
	if c.Skip == "" {
		return false
	}
	for _, w := range workloads {
		s.measurement(w, c.Name).Status = c.Skip
	}
	return true
}

// quiesce lets the machine settle before a timed measurement: it flushes
// every dirty page (unix.Sync) and checkpoints the PostgreSQL server, so
// that writes a previous contender left behind (Fast modes, a server's
// background writer) are not flushed during the next one's measurement.
func (s *Suite) quiesce(ctx context.Context) {
	if s.servers.PGURL != "" {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if conn, err := pgx.Connect(ctx, s.servers.PGURL); err == nil {
			_, _ = conn.Exec(ctx, "CHECKPOINT")
			_ = conn.Close(ctx)
		}
	}
	unix.Sync()
}

// withStore opens a contender on a fresh namespace, calls fn, and closes
// the store and removes its directory.
func (s *Suite) withStore(ctx context.Context, c Contender, fn func(Store) error) error {
	dir, err := os.MkdirTemp(s.tmp, c.Name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := c.Open(ctx, dir)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	err = fn(st)
	if d, ok := st.(Dropper); ok {
		if derr := d.Drop(ctx); err == nil && derr != nil {
			err = fmt.Errorf("drop: %w", derr)
		}
	}
	if cerr := st.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	return err
}
