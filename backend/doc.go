// Package backend is what a storage backend of idem implements, and what
// it shares with the Store above it: the Backend interface and its
// optional capabilities, the stored Record and its encoding, the errors a
// backend returns, key and scope validation. It is to package idem what
// database/sql/driver is to database/sql: a tool server calls idem; only
// the author of a backend reads this package.
//
// A backend stores records keyed by (scope, key) and offers a few atomic,
// fenced primitives on them (Backend). The policy (fingerprints, the
// error policy, recovery, replays, events) lives once in idem.Store, above
// every backend. The idemtest package holds the conformance suite a
// backend must pass; badgerstore and pgstore are the two in this module.
package backend
