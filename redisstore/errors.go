package redisstore

import "errors"

// ErrNotDurable is returned by New and Open when a Durable Backend is
// opened on a server whose settings cannot keep an acknowledged write
// through a crash of the server (appendonly not yes, appendfsync not
// always) or that may evict records (maxmemory-policy not noeviction). The
// error names the setting.
var ErrNotDurable = errors.New("redisstore: the server does not keep writes durably")

// ErrLayout is returned by New and Open when the store under the prefix
// was written with a key layout this release does not read (Layout).
var ErrLayout = errors.New("redisstore: unknown key layout")
