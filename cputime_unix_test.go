//go:build unix

package idem_test

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time the process has used, user and system:
// benchmarks on a shared machine report it per op beside their rates,
// since it counts the work done (background flushes and compactions
// included) however much of the machine others take.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
