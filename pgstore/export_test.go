package pgstore

// SetReadFirst fixes how Claim chooses its path: "auto" (the default),
// "never" (always the insert-and-take-over batch) or "always" (a SELECT
// first). For tests and benchmarks.
func SetReadFirst(b *Backend, mode string) {
	b.mix.mode = map[string]int{"auto": readFirstAuto, "never": readFirstNever, "always": readFirstAlways}[mode]
}

// ReadsFirst reports whether b's next Claim reads first.
func ReadsFirst(b *Backend) bool { return b.mix.readFirst() }
