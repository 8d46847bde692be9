package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// A Contender is one store under test in one configuration: idem in a
// durability mode, or a peer that a user would reach for instead.
type Contender struct {
	// Name is short and unique: it names the contender in tables, in the
	// JSON and on the command line (-only).
	Name string
	// Kind is "idem" for idem itself, "peer" for an alternative, or
	// "limit" for the physical limit (the raw sync loop).
	Kind string
	// Durable says whether an acknowledged write survives a power loss.
	// The targets compare idem's durable mode with durable peers only.
	Durable bool
	// Config says, in words, how the contender is configured and used;
	// it is written into the report.
	Config string
	// Skip, when set, says why the contender is not run ("no server").
	Skip string
	// Portable is true for stores whose data is all in their directory:
	// the retained-keys workload loads them once and gives each
	// repetition a copy of the directory.
	Portable bool
	// SameData names the contender whose stored data this one's equals
	// (the same store in another durability mode): the memory, disk and
	// recovery workloads measure only that one.
	SameData string
	// Open opens the contender's store in ns: a fresh directory for
	// embedded stores; servers derive a table or key prefix from it.
	// Opening the same ns again reopens the same data.
	Open func(ctx context.Context, ns string) (Store, error)
}

// Store is an open contender. Every store can be closed; what it can do
// besides is told by the capability interfaces below, and a workload that
// needs a capability a store lacks reports "n/a" for it.
type Store interface {
	Close() error
}

// Outcome is what Begin found for a key.
type Outcome uint8

const (
	// Claimed: the key was absent and this call holds it; run the effect
	// and Complete.
	Claimed Outcome = iota
	// Replayed: the key is done; Attempt.Saved holds its result.
	Replayed
	// Busy: another caller holds the key; retry later.
	Busy
)

// Attempt is Begin's answer.
type Attempt struct {
	Outcome Outcome
	// Saved is the stored result when Outcome is Replayed.
	Saved []byte
	// handle is what the store needs to complete its claim (idem's
	// *idem.Claim); peers need only the key.
	handle any
}

// Claimer is the idempotency-key protocol every contender except the raw
// sync loop implements: claim a key or learn its state, then save the
// result.
type Claimer interface {
	// Begin claims key for a request whose payload digest is fp, or says
	// why it cannot: done (with its saved result) or busy.
	Begin(ctx context.Context, key, fp string) (Attempt, error)
	// Complete saves result as the outcome of a claim Begin won.
	Complete(ctx context.Context, key string, a Attempt, result []byte) error
}

// Doer is implemented by stores with a one-call helper (idem's Store.Do);
// the hot-key workload uses it instead of Begin and Complete.
type Doer interface {
	// Do runs fn once for key and returns its result; a repeat gets the
	// saved result with replayed true. A key held by another caller
	// returns errBusy.
	Do(ctx context.Context, key, fp string, fn func() []byte) (res []byte, replayed bool, err error)
}

// Cycler is implemented by stores whose claim-and-complete cycle is not
// Begin plus Complete: the raw sync loop.
type Cycler interface {
	Cycle(ctx context.Context, key string) error
}

// Dataset is implemented by stores that can be loaded with many records
// and swept for stale claims: the retained-keys and recovery workloads.
type Dataset interface {
	// Fill stores a done record for every key, the fastest way the store
	// offers (batched transactions, pipelines). It sets up a measurement
	// and is not timed.
	Fill(ctx context.Context, keys []string, result []byte) error
	// Abandon leaves a claim in progress on every key, as a process that
	// crashed mid-effect would: their leases have ended (peers) or the
	// next open orphans them (idem).
	Abandon(ctx context.Context, keys []string) error
	// Sweep finds the stale claims and resolves each as committed, saving
	// result. It returns how many it resolved.
	Sweep(ctx context.Context, result []byte) (int, error)
}

// Indexer is implemented by stores whose stale-claim query can use an
// index that is not there by default. The recovery workload times Sweep
// once without it and once after Index.
type Indexer interface {
	Index(ctx context.Context) error
}

// Footprinter is implemented by stores whose memory or disk is not this
// process's and its directory's (servers). Values below zero are unknown.
type Footprinter interface {
	Footprint(ctx context.Context) (memBytes, diskBytes int64, note string, err error)
}

// Dropper is implemented by stores on a server: Drop deletes the
// namespace's data, so that the server does not spend the next
// contender's measurement vacuuming or checkpointing it.
type Dropper interface {
	Drop(ctx context.Context) error
}

// volatile reports whether st's data does not survive Close (the map):
// a workload that closes and reopens stores keeps such a store open.
func volatile(st Store) bool {
	v, ok := st.(interface{ Volatile() bool })
	return ok && v.Volatile()
}

// errBusy is returned by Doer when another caller holds the key.
var errBusy = errors.New("bench: key in progress")

// errMismatch is returned by peers when a stored fingerprint differs.
var errMismatch = errors.New("bench: fingerprint mismatch")

// Record states in the peers' own encodings, the same numbers idem uses.
const (
	stateInProgress = 1
	stateDone       = 2
)

// The figures every store keeps per record, the same for all contenders.
const (
	// lease is how long a claim is live; retention how long a result is
	// kept. idem's defaults.
	lease     = 30 * time.Second
	retention = 24 * time.Hour
)

// benchResult is the saved result of every effect: a small JSON answer
// as a tool server would return.
var benchResult = []byte(`{"refund":"re_3PqNXk2eZvKYlo2C","status":"succeeded","amount":4200,"currency":"eur"}`)

// benchFP is the fingerprint every request carries, shaped like idem's:
// an algorithm name and a hex SHA-256 (of "POST /refunds").
const benchFP = "idemfp1-sha256:546e759a35dad4c7d310fb03280bbc89af10c154c5f7559c8760fbec3e3f3255"

// keyOf returns the i-th key of a run named by seed, shaped like the
// UUIDv5 keys idem's helpers derive: 36 characters spread uniformly, so
// that stores see random rather than sequential inserts. It is cheap
// (two rounds of splitmix64) so that making keys costs the fast
// contenders little.
func keyOf(seed uint64, i int) string {
	hi, lo := splitmix(seed^uint64(i)), splitmix(seed+uint64(i)*0x9e3779b97f4a7c15)
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-5" + h[13:16] + "-8" + h[17:20] + "-" + h[20:32]
}

// splitmix is the splitmix64 finaliser: a bijection that spreads bits.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// keysOf returns n keys of a run.
func keysOf(seed uint64, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = keyOf(seed, i)
	}
	return keys
}

// record is the peers' stored record: what an idempotency table needs
// (state, fingerprint, lease, expiry, result) and nothing of idem's audit
// trail or fencing tokens.
type record struct {
	State     uint8
	LeaseEnds int64 // unix nanoseconds
	ExpiresAt int64 // unix nanoseconds
	FP        string
	Result    []byte
}

// encode is the record's byte form for key-value peers (bbolt, Redis):
// state, lease end, expiry, fingerprint length and bytes, result.
func (r record) encode() []byte {
	b := make([]byte, 0, 1+8+8+2+len(r.FP)+len(r.Result))
	b = append(b, r.State)
	b = binary.BigEndian.AppendUint64(b, uint64(r.LeaseEnds))
	b = binary.BigEndian.AppendUint64(b, uint64(r.ExpiresAt))
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.FP)))
	b = append(b, r.FP...)
	return append(b, r.Result...)
}

// decodeRecord reverses encode. The record's slices alias b.
func decodeRecord(b []byte) (record, error) {
	var r record
	if len(b) < 19 {
		return r, fmt.Errorf("bench: record of %d bytes", len(b))
	}
	r.State = b[0]
	r.LeaseEnds = int64(binary.BigEndian.Uint64(b[1:]))
	r.ExpiresAt = int64(binary.BigEndian.Uint64(b[9:]))
	n := int(binary.BigEndian.Uint16(b[17:]))
	if len(b) < 19+n {
		return r, fmt.Errorf("bench: record of %d bytes, fingerprint of %d", len(b), n)
	}
	r.FP = string(b[19 : 19+n])
	r.Result = b[19+n:]
	return r, nil
}

// attemptOf turns a stored peer record into Begin's answer for fp.
func attemptOf(r record, fp string) (Attempt, error) {
	if r.FP != fp {
		return Attempt{}, errMismatch
	}
	if r.State == stateDone {
		return Attempt{Outcome: Replayed, Saved: r.Result}, nil
	}
	return Attempt{Outcome: Busy}, nil
}

// claimRecord is the in-progress record a peer writes to claim a key.
func claimRecord(fp string, now time.Time) record {
	return record{State: stateInProgress, FP: fp, LeaseEnds: now.Add(lease).UnixNano()}
}

// doneRecord is the record a peer writes to complete a claim.
func doneRecord(fp string, result []byte, now time.Time) record {
	return record{State: stateDone, FP: fp, ExpiresAt: now.Add(retention).UnixNano(), Result: result}
}
