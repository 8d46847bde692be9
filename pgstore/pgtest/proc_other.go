//go:build unix && !linux

package pgtest

import "syscall"

// serverAttr runs the server as cred (nil: as the caller) in its own
// process group. There is no Pdeathsig here: a caller killed without
// stopping the server leaves it running.
func serverAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}
