package main

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cost is what the process and the disk have done so far: the process's
// CPU time (user and system), the bytes it allocated, and the write
// requests and bytes the disk holding a directory received.
type cost struct {
	cpu            time.Duration
	alloc          uint64
	diskWrites     uint64
	diskBytes      uint64
	diskWritesSeen bool
}

// costNow reads the costs so far; dir names the disk whose writes count.
func costNow(dir string) cost {
	var c cost
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	c.alloc = ms.TotalAlloc
	c.diskWrites, c.diskBytes, c.diskWritesSeen = diskWrites(dir)
	return c
}

// perOp returns the costs from c0 to c1 divided over n operations, as a
// measurement's detail: CPU microseconds, bytes allocated, and the disk's
// write requests and bytes. CPU and allocations are this process's only:
// a server's (Redis, PostgreSQL) are not in them. The disk counts every
// writer of the device, servers included. On this machine's virtual disk
// an O_DIRECT|O_DSYNC write counts as two requests (the data and a flush).
func perOp(c0, c1 cost, n int64) map[string]any {
	if n <= 0 {
		return nil
	}
	f := float64(n)
	d := map[string]any{
		"cpu_us":      float64(c1.cpu-c0.cpu) / 1e3 / f,
		"alloc_bytes": float64(c1.alloc-c0.alloc) / f,
	}
	if c0.diskWritesSeen && c1.diskWritesSeen {
		d["disk_writes"] = float64(c1.diskWrites-c0.diskWrites) / f
		d["disk_bytes"] = float64(c1.diskBytes-c0.diskBytes) / f
	}
	return d
}

// diskWrites returns the write requests completed and the bytes written on
// the block device holding dir, from /proc/diskstats (Linux).
func diskWrites(dir string) (writes, bytes uint64, ok bool) {
	var st syscall.Stat_t
	if syscall.Stat(dir, &st) != nil {
		return 0, 0, false
	}
	major, minor := uint64(unix.Major(uint64(st.Dev))), uint64(unix.Minor(uint64(st.Dev)))
	f, err := os.Open("/proc/diskstats")
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// major minor name reads ... writes merged sectors ...
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 {
			continue
		}
		if fs[0] != strconv.FormatUint(major, 10) || fs[1] != strconv.FormatUint(minor, 10) {
			continue
		}
		w, err1 := strconv.ParseUint(fs[7], 10, 64)
		s, err2 := strconv.ParseUint(fs[9], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, 0, false
		}
		return w, s * 512, true
	}
	return 0, 0, false
}
