package testutil

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"testing"
)

// ServeDNS answers, over UDP on loopback, A queries for host with
// 127.0.0.1 and TXT queries for _grpc_config.host with txt (gRPC's way of
// publishing a service config in DNS); every other query gets an empty
// answer. It returns its address.
func ServeDNS(t testing.TB, host, txt string) string {
	t.Helper()
	var lc net.ListenConfig
	pc, err := lc.ListenPacket(context.Background(), "udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := dnsAnswer(buf[:n], host, txt); resp != nil {
				_, _ = pc.WriteTo(resp, addr)
			}
		}
	}()
	return pc.LocalAddr().String()
}

// dnsAnswer is ServeDNS's answer to the query q (nil: not a query it reads).
func dnsAnswer(q []byte, host, txt string) []byte {
	if len(q) < 12 {
		return nil
	}
	i := 12
	var labels []string
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if l > 63 || i+1+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+l]))
		i += 1 + l
	}
	if i+5 > len(q) {
		return nil
	}
	qtype, qend := binary.BigEndian.Uint16(q[i+1:]), i+5
	name := strings.ToLower(strings.Join(labels, "."))
	var rdata []byte
	switch {
	case qtype == 1 && name == host:
		rdata = []byte{127, 0, 0, 1}
	case qtype == 16 && name == "_grpc_config."+host:
		for s := txt; s != ""; {
			n := min(len(s), 255)
			rdata = append(append(rdata, byte(n)), s[:n]...)
			s = s[n:]
		}
	}
	resp := append([]byte{q[0], q[1], 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0}, q[12:qend]...)
	if rdata != nil {
		resp[7] = 1
		resp = append(resp, 0xc0, 0x0c, byte(qtype>>8), byte(qtype), 0, 1, 0, 0, 0, 30, byte(len(rdata)>>8), byte(len(rdata)))
		resp = append(resp, rdata...)
	}
	return resp
}
