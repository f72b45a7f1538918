package testutil

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// A held port refuses connections (nothing listens) and is given to no
// outgoing connection; once released, a server listens there again.
func TestHoldPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	release := HoldPort(t, addr)

	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		_ = c.Close()
		t.Fatalf("a connection to the held %s was accepted", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial the held %s: %v; want connection refused", addr, err)
	}
	// Many outgoing connections: none takes the held port as its source.
	srv, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
	go func() {
		for {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	for range 2000 {
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if c.LocalAddr().String() == addr {
			t.Fatalf("an outgoing connection took the held port %s", addr)
		}
		_ = c.Close()
	}

	release()
	release() // twice is harmless
	again, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s after release: %v", addr, err)
	}
	_ = again.Close()
}
