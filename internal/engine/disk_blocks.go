//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package engine

import (
	"io/fs"
	"syscall"
)

// allocated returns the bytes of disk allocated to a file: its blocks.
func allocated(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return info.Size()
}
