//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package connctx

import "syscall"

// peek reads one byte of rc with MSG_PEEK|MSG_DONTWAIT: it takes nothing
// from the socket and never blocks. A socket closed on this side (the
// server is done with it) fails RawConn.Read before any system call, so a
// descriptor number reused by another socket is never read.
func peek(rc syscall.RawConn) state {
	var (
		b   [1]byte
		n   int
		err error
	)
	if rerr := rc.Read(func(fd uintptr) bool {
		n, _, err = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	}); rerr != nil {
		return unknown
	}
	switch {
	case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || err == syscall.EINTR:
		return open
	case err != nil:
		return gone // ECONNRESET and the like
	case n == 0:
		return gone // the client's FIN
	default:
		return unknown // it sent more: what follows cannot be seen without reading it
	}
}
