package executor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// deniedPrefixes are the address ranges http.request never connects to
// unless the configuration allows them: everything that is not the public
// internet, and the ranges that embed an IPv4 address in an IPv6 one.
func deniedPrefixes() []netip.Prefix {
	ranges := []string{
		"0.0.0.0/8",          // "this network"
		"10.0.0.0/8",         // private
		"100.64.0.0/10",      // carrier-grade NAT (and Alibaba's metadata)
		"127.0.0.0/8",        // loopback
		"169.254.0.0/16",     // link-local (and most clouds' metadata)
		"172.16.0.0/12",      // private
		"192.0.0.0/24",       // IETF protocol assignments
		"192.0.2.0/24",       // documentation
		"192.88.99.0/24",     // 6to4 relay anycast
		"192.168.0.0/16",     // private
		"198.18.0.0/15",      // benchmarking
		"198.51.100.0/24",    // documentation
		"203.0.113.0/24",     // documentation
		"224.0.0.0/4",        // multicast
		"240.0.0.0/4",        // reserved, and broadcast
		"::/128",             // unspecified
		"::1/128",            // loopback
		"::ffff:0:0/96",      // IPv4-mapped (checked unmapped as well)
		"::/96",              // IPv4-compatible (deprecated)
		"64:ff9b::/96",       // NAT64
		"64:ff9b:1::/48",     // local-use NAT64
		"100::/64",           // discard
		"2001::/32",          // Teredo
		"2001:db8::/32",      // documentation
		"2002::/16",          // 6to4
		"fc00::/7",           // unique-local (and AWS's fd00:ec2::254)
		"fe80::/10",          // link-local
		"fec0::/10",          // site-local (deprecated)
		"ff00::/8",           // multicast
		"168.63.129.16/32",   // Azure's platform endpoint (a public address)
		"100.100.100.200/32", // Alibaba Cloud metadata
	}
	out := make([]netip.Prefix, len(ranges))
	for i, r := range ranges {
		out[i] = netip.MustParsePrefix(r)
	}
	return out
}

// globalUnicast6 is IPv6's global unicast space.
var globalUnicast6 = netip.MustParsePrefix("2000::/3")

// metadataAddrs are cloud metadata endpoints: reachable only when the
// configuration lists the exact address, never through a wider prefix.
func metadataAddrs() []netip.Addr {
	var out []netip.Addr
	for _, a := range []string{"169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "168.63.129.16", "192.0.0.192"} {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// addrGuard decides which IP addresses a tool may connect to.
type addrGuard struct {
	denied   []netip.Prefix
	metadata []netip.Addr
	allowed  []netip.Prefix
	// perHost are addresses allowed only for connections to one host.
	perHost []hostAddrs
}

// hostAddrs is a host_addresses entry: prefixes of the denied ranges a
// connection to the host (and port) of rule may reach.
type hostAddrs struct {
	rule     hostRule
	prefixes []netip.Prefix
}

func newAddrGuard(allowed []netip.Prefix, perHost ...hostAddrs) *addrGuard {
	return &addrGuard{denied: deniedPrefixes(), metadata: metadataAddrs(), allowed: allowed, perHost: perHost}
}

// forHost is the guard of a connection to host (as in the URL, lower
// case) on port: the addresses allowed for every host and those allowed
// for it.
func (g *addrGuard) forHost(host, port string) *addrGuard {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.String()
	}
	c := *g
	c.perHost = nil
	for _, h := range g.perHost {
		r := h.rule
		match := host == r.host
		if r.wildcard {
			match = strings.HasSuffix(host, "."+r.host)
		}
		if match && (r.port == port || r.port == "" && (port == "80" || port == "443")) {
			c.allowed = append(slices.Clip(c.allowed), h.prefixes...)
		}
	}
	return &c
}

// blockedError is a connection the guard refused.
type blockedError struct {
	host   string
	reason string
}

func (e *blockedError) Error() string {
	if e.host == "" {
		return e.reason
	}
	return fmt.Sprintf("%s: %s", e.host, e.reason)
}

// check returns nil when ip may be connected to.
func (g *addrGuard) check(ip netip.Addr) error {
	if !ip.IsValid() {
		return &blockedError{reason: "no valid address"}
	}
	ip = ip.WithZone("")
	// ::ffff:127.0.0.1 is 127.0.0.1: check what the kernel connects to.
	if ip.Is4In6() {
		ip = ip.Unmap()
	}
	for _, m := range g.metadata {
		if ip == m {
			for _, a := range g.allowed {
				if a.IsSingleIP() && a.Addr() == ip {
					return nil
				}
			}
			return &blockedError{host: ip.String(), reason: "is a cloud metadata address"}
		}
	}
	for _, a := range g.allowed {
		if a.Contains(ip) {
			return nil
		}
	}
	special := ip.IsUnspecified() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() ||
		ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast()
	if special {
		return &blockedError{host: ip.String(), reason: "is not a public address"}
	}
	// Public IPv6 is global unicast, 2000::/3: everything else is
	// reserved, local or a translation of an IPv4 address (mapped,
	// compatible, SIIT's ::ffff:0:0/96, NAT64), which a translator on the
	// way could turn into a private or metadata address.
	if ip.Is6() && !globalUnicast6.Contains(ip) {
		return &blockedError{host: ip.String(), reason: "is not a global unicast IPv6 address (2000::/3)"}
	}
	for _, d := range g.denied {
		if d.Contains(ip) {
			return &blockedError{host: ip.String(), reason: "is in the denied range " + d.String()}
		}
	}
	return nil
}

// control re-checks the address of every socket right before it connects,
// whatever resolved it.
func (g *addrGuard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &blockedError{host: address, reason: "not an IP address and port"}
	}
	return g.check(ap.Addr())
}

// dialContext resolves a host itself, keeps only the addresses the guard
// allows, and connects to those addresses (not to the name, which could
// resolve differently a moment later: DNS rebinding).
func (g *addrGuard) dialContext(resolver Resolver, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		// An address allowed for one host is not for another: a name
		// under an allowed wildcard whose DNS someone else controls
		// (a dangling CNAME) must not reach an internal service.
		hg := g.forHost(host, port)
		d := &net.Dialer{Timeout: timeout, Control: hg.control}
		var ips []netip.Addr
		if ip, err := netip.ParseAddr(host); err == nil {
			ips = []netip.Addr{ip}
		} else {
			ips, err = resolver.LookupNetIP(ctx, "ip", host)
			if err != nil {
				return nil, err
			}
		}
		var allowed []netip.Addr
		var first error
		for _, ip := range ips {
			if err := hg.check(ip); err != nil {
				if first == nil {
					first = err
				}
				continue
			}
			allowed = append(allowed, ip)
		}
		if len(allowed) == 0 {
			if first == nil {
				first = &blockedError{host: host, reason: "resolves to no address"}
			}
			if be := (*blockedError)(nil); errors.As(first, &be) && be.host != host {
				first = &blockedError{host: host, reason: "resolves to " + be.Error()}
			}
			return nil, first
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("bad port %q", port)
		}
		var last error
		for _, ip := range allowed {
			conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(ip.Unmap(), uint16(p)).String())
			if err == nil {
				return conn, nil
			}
			last = err
		}
		return nil, last
	}
}

// hostRule is one allow_hosts entry.
type hostRule struct {
	host     string // lower case, no trailing dot; "*.x" matches subdomains of x
	wildcard bool
	port     string // "" means the scheme's default port
}

func parseHostRule(s string) (hostRule, error) {
	in := s
	var r hostRule
	if strings.ContainsAny(s, "/@?# ") {
		return r, fmt.Errorf("%q is not a host name, \"*.domain\" or an IP address", in)
	}
	if h, p, err := net.SplitHostPort(s); err == nil {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return r, fmt.Errorf("%q: bad port", in)
		}
		s, r.port = h, p
	}
	s = strings.TrimSuffix(strings.ToLower(s), ".")
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		r.wildcard, s = true, rest
	}
	if s == "" || strings.ContainsAny(s, "*/@?#[] ") {
		return r, fmt.Errorf("%q is not a host name, \"*.domain\" or an IP address", in)
	}
	for _, c := range s {
		if c > 0x7e {
			return r, fmt.Errorf("%q: use the ASCII (punycode) form of the name", in)
		}
	}
	if ip, err := netip.ParseAddr(s); err == nil {
		if r.wildcard {
			return r, fmt.Errorf("%q: an IP address cannot have a wildcard", in)
		}
		s = ip.String()
	}
	r.host = s
	return r, nil
}

// urlGuard checks the URLs of a request and of every redirect.
type urlGuard struct {
	hosts     []hostRule
	httpsOnly bool
}

// matchHost reports whether u's host and port are one of rules'.
func matchHost(rules []hostRule, u *url.URL) bool {
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.String()
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	defPort := (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443")
	for _, r := range rules {
		match := host == r.host
		if r.wildcard {
			match = strings.HasSuffix(host, "."+r.host)
		}
		if match && (r.port == port || r.port == "" && defPort) {
			return true
		}
	}
	return false
}

// check returns the reason u may not be requested, or nil.
func (g *urlGuard) check(u *url.URL) error {
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return &blockedError{host: u.Host, reason: fmt.Sprintf("scheme %q is not allowed: only http and https", u.Scheme)}
	case g.httpsOnly && u.Scheme != "https":
		return &blockedError{host: u.Host, reason: "only https is allowed"}
	case u.Opaque != "" || u.Host == "":
		return &blockedError{reason: "the URL has no host"}
	case u.User != nil:
		return &blockedError{host: u.Host, reason: "credentials in the URL are not allowed"}
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return &blockedError{host: u.Host, reason: "bad port"}
	}
	if matchHost(g.hosts, u) {
		return nil
	}
	return &blockedError{host: u.Host, reason: "is not in the allowed hosts"}
}

// isBlocked reports whether err (as returned by an HTTP client) is a
// refusal of the guards, and returns it.
func isBlocked(err error) (*blockedError, bool) {
	var be *blockedError
	if errors.As(err, &be) {
		return be, true
	}
	return nil, false
}
