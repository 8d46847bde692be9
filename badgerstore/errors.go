package badgerstore

import "errors"

// ErrUnclean is returned by a read-only open of a store that the last
// process holding it did not close (it crashed or was killed) and that
// holds writes only a read-write open applies. Open it for writing once (a
// server start, or idem sweep), then read it.
var ErrUnclean = errors.New("idem: store not closed cleanly")

// ErrDirNotEmpty is returned by Restore when the directory to restore
// into holds files: a restore never mixes a backup with another store.
var ErrDirNotEmpty = errors.New("idem: directory not empty")
