// Package badgerstore is idem's embedded backend: records in a Badger
// directory on the local disk, written through idem's own commit pipeline
// (internal/engine), so a single binary needs no database server.
// idem.Open uses it with its defaults; open it here to tune it, and hand
// it to idem.New:
//
//	b, err := badgerstore.Open(dir, badgerstore.Options{Compression: badgerstore.CompressionZstd})
//	if err != nil {
//		return err
//	}
//	store := idem.New(b, &idem.Options{Resolver: ledger})
//
// A directory serves one process at a time (Badger locks it). Durable,
// the default, syncs every commit before it is acknowledged; Options has
// the memory budget's engine share, the free space kept in reserve, the
// checks made at open and what an open accepts after a loss. Store.Backup
// writes a consistent backup file while the store serves, and Restore
// loads one into an empty directory. docs/engine.md explains how it works.
package badgerstore
