package testutil

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// HoldPort keeps the loopback TCP address addr ("127.0.0.1:port") from
// being taken while a test's server there is down: a socket bound to it,
// not listening, so a client's connection is refused there as when
// nothing is bound, while the kernel gives the port to no other socket
// (an outgoing connection's source port, another test's listener on port
// 0). Without it a server stopped and started again on its address can
// find the port taken in between on a busy machine. The returned release
// frees the port (call it just before listening there again); it is safe
// to call more than once and is called when the test ends. When the port
// cannot be held (it is in use already), release does nothing.
func HoldPort(tb testing.TB, addr string) (release func()) {
	tb.Helper()
	nop := func() {}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		tb.Fatalf("hold port: %v", err)
	}
	ip := net.ParseIP(host).To4()
	n, err := strconv.Atoi(port)
	if ip == nil || !ip.IsLoopback() || err != nil || n <= 0 {
		tb.Fatalf("hold port: %q is not a loopback IPv4 address with a port", addr)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("hold port: %v", err)
	}
	// SO_REUSEADDR: the stopped server's connections may still be in
	// TIME_WAIT on this port.
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		_ = syscall.Close(fd)
		tb.Fatalf("hold port: %v", err)
	}
	sa := &syscall.SockaddrInet4{Port: n}
	copy(sa.Addr[:], ip)
	if err := syscall.Bind(fd, sa); err != nil {
		_ = syscall.Close(fd)
		return nop
	}
	released := false
	release = func() {
		if !released {
			released = true
			_ = syscall.Close(fd)
		}
	}
	tb.Cleanup(release)
	return release
}
