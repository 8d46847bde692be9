package redistest

import "syscall"

// serverAttr runs the server in its own process group; Pdeathsig kills it
// if the caller dies without stopping it, so no server outlives its run.
func serverAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
