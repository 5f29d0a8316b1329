//go:build unix

package ratelimit

import (
	"sync"
	"syscall"
)

// pauseProcess stops process pid (SIGSTOP): it keeps its sockets, and the
// kernel still accepts connections for it, but it runs no more until the
// returned resume (SIGCONT), which may be called more than once.
func pauseProcess(pid int) (resume func(), err error) {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, err
	}
	return sync.OnceFunc(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }), nil
}
