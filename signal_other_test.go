//go:build !unix

package ratelimit

import "errors"

// pauseProcess needs SIGSTOP, which only Unix systems have.
func pauseProcess(int) (resume func(), err error) {
	return nil, errors.New("stopping a process takes SIGSTOP, which this system does not have")
}
