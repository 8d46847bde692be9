package idemotel

// Watching returns how many requests are being traced, for tests to check
// that none is left registered.
func (t *Telemetry) Watching() int64 { return t.watching.Load() }
