//go:build race

package badgerstore_test

// raceEnabled reports whether the race detector is on: it makes sync.Pool
// drop items at random, so allocation counts are not exact under it.
const raceEnabled = true
