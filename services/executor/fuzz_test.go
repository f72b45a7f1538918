package executor

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xct-dev/xct/internal/wire"
)

// FuzzFSPath feeds arbitrary paths to every fs tool over a workspace that
// holds symbolic links leading out of it, and checks that nothing outside
// the workspace is ever read, created, moved, deleted or changed.
func FuzzFSPath(f *testing.F) {
	for _, seed := range []string{
		"a.txt", "a/b/c.txt", ".", "./", "", "..", "../outside.txt", "a/../../outside.txt",
		"/etc/passwd", `\..\outside.txt`, "link-abs", "link-rel", "dirlink-abs/f.txt",
		"dirlink-rel/new.txt", "up/outside.txt", "up/ws/a.txt", "x\x00y", "\xff", "a//b/./c/",
	} {
		f.Add(seed)
	}
	sb := newSandbox(f)
	sb.links(f)
	s := newService(f, sb.ws)
	allowed := map[string]bool{
		"": true, string(wire.CodePermissionDenied): true, string(wire.CodeNotFound): true,
		string(wire.CodeInvalidArgument): true, string(wire.CodeOutputTooLarge): true,
	}
	f.Fuzz(func(t *testing.T, p string) {
		// fs.delete and fs.move may remove the links: put them back, so
		// every input meets them.
		for _, l := range []string{"link-abs", "link-rel", "dirlink-abs", "dirlink-rel", "up"} {
			_ = os.RemoveAll(filepath.Join(sb.ws, l))
		}
		sb.links(t)
		must(t, os.WriteFile(filepath.Join(sb.ws, "victim.txt"), []byte("v"), 0o644))
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"fs.read", map[string]any{"path": p}},
			{"fs.write", map[string]any{"path": p, "content": "fuzz"}},
			{"fs.write", map[string]any{"path": p, "content": "fuzz", "create_dirs": false}},
			{"fs.list", map[string]any{"path": p}},
			{"fs.move", map[string]any{"from": "victim.txt", "to": p}},
			{"fs.move", map[string]any{"from": p, "to": "moved.txt"}},
			{"fs.delete", map[string]any{"path": p}},
			{"fs.delete", map[string]any{"path": p, "recursive": true}},
		} {
			r := run(t, s, c.tool, c.args)
			if code := codeOf(r); !allowed[code] {
				t.Fatalf("%s(%q) = %s: %s", c.tool, p, code, r.GetError().GetMessage())
			}
			if r.GetError() == nil {
				checkInside(t, sb, c.tool, r.GetSuccess().GetResult().GetStructValue().AsMap())
			}
		}
		sb.untouched(t)
	})
}

// checkInside fails if a successful result names something outside the
// workspace or carries the outside secret.
func checkInside(t *testing.T, sb sandbox, tool string, res map[string]any) {
	t.Helper()
	keys := []string{"path"}
	if tool == "fs.move" {
		keys = []string{"from", "to"}
	}
	var rel string
	for _, k := range keys {
		rel, _ = res[k].(string)
		if !filepath.IsLocal(rel) {
			t.Fatalf("%s returned %s %q", tool, k, rel)
		}
	}
	switch tool {
	case "fs.read":
		if res["content"] == secret {
			t.Fatalf("fs.read(%q) read the outside secret", rel)
		}
	case "fs.write":
		got, err := os.ReadFile(filepath.Join(sb.ws, filepath.FromSlash(rel)))
		if err != nil || string(got) != "fuzz" {
			t.Fatalf("fs.write(%q) did not land inside the workspace: %q, %v", rel, got, err)
		}
	}
}

// FuzzHTTPGuard feeds arbitrary URLs to http.request's URL guard and
// arbitrary addresses to its address guard. An allowed URL is http or
// https, carries no credentials and names an allowed host and port; an
// allowed address is public, whatever form (IPv4, IPv4-mapped IPv6, with
// a zone) it takes.
func FuzzHTTPGuard(f *testing.F) {
	for _, seed := range []struct {
		url string
		ip  []byte
	}{
		{"https://api.example.com/x", []byte{93, 184, 216, 34}},
		{"http://API.example.com.:80/", []byte{127, 0, 0, 1}},
		{"https://a.example.org/", netip.MustParseAddr("::ffff:127.0.0.1").AsSlice()},
		{"https://example.org/", netip.MustParseAddr("fd00:ec2::254").AsSlice()},
		{"http://user@api.example.com/", []byte{169, 254, 169, 254}},
		{"file:///etc/passwd", []byte{100, 64, 0, 1}},
		{"http://[::1]:443/", netip.MustParseAddr("64:ff9b::a00:1").AsSlice()},
		{"https://api.example.com:8443/", netip.MustParseAddr("2606:4700::1111").AsSlice()},
		{"https://api.example.com%2f@evil/", []byte{10, 0, 0, 1}},
		{"HTTPS://api.example.com/", []byte{0, 0, 0, 0}},
	} {
		f.Add(seed.url, seed.ip)
	}
	var rules []hostRule
	for _, s := range []string{"api.example.com", "*.example.org"} {
		r, err := parseHostRule(s)
		if err != nil {
			f.Fatal(err)
		}
		rules = append(rules, r)
	}
	urls := urlGuard{hosts: rules}
	addrs := newAddrGuard(nil)
	tool := &httpTool{urls: urls}
	f.Fuzz(func(t *testing.T, raw string, ip []byte) {
		if u, e := tool.parseURL(raw); e == nil {
			host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
			port := u.Port()
			switch {
			case u.Scheme != "http" && u.Scheme != "https":
				t.Fatalf("%q allowed with scheme %q", raw, u.Scheme)
			case u.User != nil:
				t.Fatalf("%q allowed with credentials", raw)
			case host != "api.example.com" && !strings.HasSuffix(host, ".example.org"):
				t.Fatalf("%q allowed for host %q", raw, host)
			case port != "" && (u.Scheme != "http" || port != "80") && (u.Scheme != "https" || port != "443"):
				t.Fatalf("%q allowed on port %q", raw, port)
			}
		}
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			return
		}
		for _, form := range []netip.Addr{a, a.WithZone("eth0"), netip.AddrFrom16(a.As16())} {
			if form.Is4() && form.Zone() != "" {
				continue
			}
			if addrs.check(form) != nil {
				continue
			}
			u := form.Unmap()
			if u.IsLoopback() || u.IsPrivate() || u.IsUnspecified() || u.IsLinkLocalUnicast() || u.IsMulticast() ||
				u.IsLinkLocalMulticast() || u.IsInterfaceLocalMulticast() ||
				netip.MustParsePrefix("100.64.0.0/10").Contains(u) || netip.MustParsePrefix("64:ff9b::/96").Contains(u) ||
				netip.MustParsePrefix("2002::/16").Contains(u) || u == netip.MustParseAddr("168.63.129.16") {
				t.Fatalf("%v (%v) allowed", form, ip)
			}
			// The verdict does not depend on the form.
			if addrs.check(a.Unmap()) != nil {
				t.Fatalf("%v allowed but %v not", form, a.Unmap())
			}
		}
	})
}

// FuzzProtectedPaths feeds arbitrary paths to the fs tools that change the
// workspace and checks that no protected path (.git, hooks, tool config
// files, a configured one) ever changes, whatever the spelling.
func FuzzProtectedPaths(f *testing.F) {
	for _, seed := range []string{
		".git/config", ".GIT/config", ".git./config", "cfg/config", "subl/.git/config", "sub",
		".git", "dir/../.git/hooks/x", ".npmrc", "APP/.ENVRC", "app/.envrc", ".xct", "secrets/a", "plain.txt",
	} {
		f.Add(seed)
	}
	sb, s := protectedFixture(f)
	guarded := []string{".git", "sub/.git", ".xct", ".npmrc", "app/.envrc"}
	hashes := func(tb testing.TB) []string {
		var out []string
		for _, g := range guarded {
			h := treeHash(tb, filepath.Join(sb.ws, g))
			out = append(out, string(h[:]))
		}
		return out
	}
	want := hashes(f)
	f.Fuzz(func(t *testing.T, p string) {
		must(t, os.WriteFile(filepath.Join(sb.ws, "victim.txt"), []byte("v"), 0o644))
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"fs.write", map[string]any{"path": p, "content": "fuzz"}},
			{"fs.move", map[string]any{"from": "victim.txt", "to": p}},
			{"fs.move", map[string]any{"from": p, "to": "moved"}},
			{"fs.delete", map[string]any{"path": p, "recursive": true}},
		} {
			r := run(t, s, c.tool, c.args)
			if r.GetError() == nil && (newProtectedPaths([]string{"secrets/", "deploy.key"}).match(p) != "") {
				t.Fatalf("%s(%q) succeeded on a protected path", c.tool, p)
			}
			_ = os.RemoveAll(filepath.Join(sb.ws, "moved"))
		}
		if got := hashes(t); !slices.Equal(got, want) {
			t.Fatalf("a protected path changed after %q", p)
		}
		sb.untouched(t)
	})
}
