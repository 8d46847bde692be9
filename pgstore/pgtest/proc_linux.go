package pgtest

import "syscall"

// serverAttr runs the server as cred (nil: as the caller) in its own
// process group. Pdeathsig stops it if the caller dies without stopping it
// (a timeout's SIGKILL), so no cluster outlives its run.
func serverAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
}
