//go:build unix && !linux

package redistest

import "syscall"

// serverAttr runs the server in its own process group.
func serverAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
