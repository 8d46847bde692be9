//go:build !unix

package idem_test

import "time"

// processCPU is unknown here: the benchmarks report zero.
func processCPU() time.Duration { return 0 }
