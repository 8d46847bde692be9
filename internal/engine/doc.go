// Package engine is idem's commit pipeline over Badger: every write runs
// as an op on one committer goroutine, which gathers the ops that arrive
// together into a unit (one Badger transaction); a syncer makes each unit
// durable in idem's log (internal/wal) with one frame and one sync, and
// answers its ops; an applier then commits the unit to Badger. When ops
// come one at a time, the committer lends its role to the next caller,
// which logs its own unit with no goroutine woken on its way; the applier
// is woken for such units only once a few wait, or when something needs
// Badger to hold every answered write (settle). Keys and
// values are bytes: the engine knows nothing of records.
//
// # Semantics
//
//   - Ops run one at a time, each seeing the writes of every op answered
//     or run before it: no write slips between an op's read and its write.
//   - Under Durable, an op is answered once its unit's frame is synced;
//     under Fast (no log), once Badger holds the unit.
//   - Visibility (Read): a reader outside the committer sees every write
//     that was answered and none that is not yet durable; an op sees every
//     write of the ops before it. Writes between the log and Badger live in
//     one pending-writes index, and Read is the one function that looks
//     there, then in Options.Resident, then in Badger.
//   - If a log write, sync or commit fails, its ops get the error and the
//     engine refuses every later write until it is reopened, which replays
//     the log. Reads go on.
//   - Open replays the log into Badger and checkpoints: Badger's files
//     are synced and the log starts a new generation.
//
// docs/engine.md has the argument for why this keeps the contract, and
// the measurements behind each stage.
//
// # Caveats
//
// One process holds a directory at a time (Badger's lock). Writes made
// through DB bypass the log and the pending index: they are for tests and
// maintenance only.
package engine
