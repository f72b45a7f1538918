package executor

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xct-dev/xct/internal/wire"
)

// rustupEnv is the environment in which the host's rustup proxies
// (cargo, rustc) find their toolchains with the test's own HOME: the
// host's RUSTUP_HOME and CARGO_HOME (their defaults under the real home
// when unset). ok is false when the host has no rustup proxy for cargo.
func rustupEnv(tb testing.TB) (env []string, ok bool) {
	tb.Helper()
	if _, err := osexec.LookPath("rustup"); err != nil {
		return nil, false
	}
	cargo, err := osexec.LookPath("cargo")
	if err != nil {
		return nil, false
	}
	// A proxy is rustup itself under another name.
	if real, err := filepath.EvalSymlinks(cargo); err != nil || filepath.Base(real) != "rustup" && filepath.Base(real) != "rustup-init" {
		return nil, false
	}
	home, _ := os.UserHomeDir()
	rh, ch := os.Getenv("RUSTUP_HOME"), os.Getenv("CARGO_HOME")
	if rh == "" {
		rh = filepath.Join(home, ".rustup")
	}
	if ch == "" {
		ch = filepath.Join(home, ".cargo")
	}
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + tb.TempDir(), "RUSTUP_HOME=" + rh, "CARGO_HOME=" + ch}, true
}

// TestProtectedToolchainFiles: rustup's proxies (cargo, rustc,
// rust-analyzer's cargo metadata when an editor opens the folder) run
// the toolchain a rust-toolchain.toml (or the legacy rust-toolchain)
// of the working directory or any directory above names, and its
// `path` key (a legacy file's line) names a directory whose bin/cargo
// they run. On main fs.write (reversible, no human) wrote both files at
// the top and below, naming the workspace's tc/ by its absolute path
// (a model learns it from a goal, a dep-info file, a lockfile);
// fs.move of a human's executable script to tc/bin/cargo and fs.write
// over it (the mode is kept) gave it the model's content; and the next
// human's `cargo --version` (rustup 1.29) ran it on the host. Now
// rust-toolchain and rust-toolchain.toml are protected paths, as
// .tool-versions and mise.toml (session 11) are.
func TestProtectedToolchainFiles(t *testing.T) {
	sb := newSandbox(t)
	writeFiles(t, sb.ws, 0o755, map[string]string{"scripts/fmt.sh": "#!/bin/sh\necho fmt\n"})
	writeFiles(t, sb.ws, 0o644, map[string]string{"Cargo.toml": "[package]\nname = \"app\"\nversion = \"0.1.0\"\n", "sub/x.txt": "x\n"})
	mark := filepath.Join(sb.dir, "ran")
	s := newService(t, sb.ws)
	// The model's executable: a human's script moved and rewritten.
	if r := exec(t, s, "fs.write", map[string]any{"path": "tc/bin/README", "content": "x\n"}); codeOf(r) != "" {
		t.Fatalf("fs.write: %v", r)
	}
	if r := exec(t, s, "fs.move", map[string]any{"from": "scripts/fmt.sh", "to": "tc/bin/cargo"}); codeOf(r) != "" {
		t.Fatalf("fs.move: %v", r)
	}
	if r := exec(t, s, "fs.write", map[string]any{"path": "tc/bin/cargo", "content": "#!/bin/sh\ntouch " + mark + "\n"}); codeOf(r) != "" {
		t.Fatalf("fs.write: %v", r)
	}
	if fi, err := os.Stat(filepath.Join(sb.ws, "tc/bin/cargo")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Fatalf("tc/bin/cargo is not executable (%v): the primitive this test needs changed", err)
	}
	tc := filepath.Join(sb.ws, "tc")
	var written []string
	for _, c := range []struct{ path, content string }{
		{"rust-toolchain.toml", "[toolchain]\npath = \"" + tc + "\"\n"},
		{"sub/rust-toolchain.toml", "[toolchain]\npath = \"" + tc + "\"\n"},
		{"rust-toolchain", tc + "\n"},
		{"sub/rust-toolchain", tc + "\n"},
		{"Rust-Toolchain.TOML", "[toolchain]\npath = \"" + tc + "\"\n"},
	} {
		r := exec(t, s, "fs.write", map[string]any{"path": c.path, "content": c.content})
		if codeOf(r) == "" {
			written = append(written, c.path)
		} else if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), "protected path") {
			t.Errorf("fs.write %s: %v, want PERMISSION_DENIED (a protected path)", c.path, r)
		}
	}
	// Nor made by a move of an ordinary file.
	writeFiles(t, sb.ws, 0o644, map[string]string{"notes/toolchain.txt": "[toolchain]\npath = \"" + tc + "\"\n"})
	if r := exec(t, s, "fs.move", map[string]any{"from": "notes/toolchain.txt", "to": "crates/a/rust-toolchain.toml"}); codeOf(r) == "" {
		written = append(written, "crates/a/rust-toolchain.toml (moved)")
	}
	// The next human builds the project on the host.
	if env, ok := rustupEnv(t); ok {
		for _, dir := range []string{sb.ws, filepath.Join(sb.ws, "sub")} {
			cmd := osexec.Command("cargo", "--version")
			cmd.Dir = dir
			cmd.Env = env
			out, _ := cmd.CombinedOutput()
			if _, err := os.Stat(mark); err == nil {
				t.Fatalf("the next human's cargo --version in %s ran the model's tc/bin/cargo (fs.write wrote %v): %s", dir, written, out)
			}
		}
	} else {
		t.Log("no rustup proxy for cargo on this host: only the fs tools' refusals were checked")
	}
	if len(written) > 0 {
		t.Errorf("the fs tools wrote %v", written)
	}
	wantWritable(t, s, "docs/rust-toolchain.md", "rust-toolchain.toml.example", "toolchain.toml")
}

// TestProtectedVersionFilesNamingPrograms: version files that launchers
// read from the working directory (and the directories above) and that
// may name a program by its path, which the launcher then runs in
// place of the tool: bazelisk's .bazelversion (a path is run as bazel)
// and .bazeliskrc (USE_BAZEL_VERSION the same; BAZELISK_BASE_URL a
// server to download bazel from), and uv's .python-version and
// .python-versions (an interpreter's path or an installation's
// directory is a Python request uv runs). On main fs.write (reversible,
// no human) wrote each, at the top and below, and the next human's
// `bazelisk version` ran the model's tc/bazel (bazelisk 1.28.1, the
// binary of its npm package put on PATH for the run; by hand also for
// .bazeliskrc alone, from a subdirectory); uv's is from its
// documentation (no uv here). pyenv, which
// reads .python-version too, refuses a path (session 19). The test runs
// bazelisk where the host has it. Now they are protected paths.
func TestProtectedVersionFilesNamingPrograms(t *testing.T) {
	sb := newSandbox(t)
	writeFiles(t, sb.ws, 0o755, map[string]string{"tc/bazel": "#!/bin/sh\necho bazel\n", "tc/bin/python3": "#!/bin/sh\necho python\n"})
	// The human's project pins bazel 7.4.1.
	writeFiles(t, sb.ws, 0o644, map[string]string{"MODULE.bazel": "module(name = \"app\")\n", ".bazelversion": "7.4.1\n", "sub/x.txt": "x\n"})
	mark := filepath.Join(sb.dir, "ran")
	s := newService(t, sb.ws)
	if r := exec(t, s, "fs.write", map[string]any{"path": "tc/bazel", "content": "#!/bin/sh\ntouch " + mark + "\n"}); codeOf(r) != "" {
		t.Fatalf("fs.write: %v", r)
	}
	bazel, python := filepath.Join(sb.ws, "tc/bazel"), filepath.Join(sb.ws, "tc/bin/python3")
	var written []string
	for _, c := range []struct{ path, content string }{
		{".bazelversion", bazel + "\n"},
		{"sub/.bazelversion", bazel + "\n"},
		{".bazeliskrc", "USE_BAZEL_VERSION=" + bazel + "\n"},
		{"sub/.bazeliskrc", "BAZELISK_BASE_URL=http://127.0.0.1:9/bazel\n"},
		{".python-version", python + "\n"},
		{"sub/.python-version", filepath.Join(sb.ws, "tc") + "\n"},
		{".python-versions", python + "\n"},
		{".Python-Version", python + "\n"},
	} {
		r := exec(t, s, "fs.write", map[string]any{"path": c.path, "content": c.content})
		if codeOf(r) == "" {
			written = append(written, c.path)
		} else if codeOf(r) != string(wire.CodePermissionDenied) || !strings.Contains(r.GetError().GetMessage(), "protected path") {
			t.Errorf("fs.write %s: %v, want PERMISSION_DENIED (a protected path)", c.path, r)
		}
	}
	writeFiles(t, sb.ws, 0o644, map[string]string{"notes/v.txt": bazel + "\n"})
	if r := exec(t, s, "fs.move", map[string]any{"from": "notes/v.txt", "to": "pkg/.bazelversion"}); codeOf(r) == "" {
		written = append(written, "pkg/.bazelversion (moved)")
	}
	if bazelisk, err := osexec.LookPath("bazelisk"); err == nil {
		// The human's mirror (a loopback server) serves the human's
		// bazel, which bazelisk downloads for the pinned version.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "#!/bin/sh\necho human bazel ran\n")
		}))
		defer srv.Close()
		for _, dir := range []string{sb.ws, filepath.Join(sb.ws, "sub")} {
			cmd := osexec.Command(bazelisk, "version")
			cmd.Dir = dir
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "BAZELISK_HOME=" + t.TempDir(), "BAZELISK_BASE_URL=" + srv.URL}
			out, _ := cmd.CombinedOutput()
			if _, err := os.Stat(mark); err == nil {
				t.Fatalf("the next human's bazelisk version in %s ran the model's tc/bazel (fs.write wrote %v): %s", dir, written, out)
			}
			if !strings.Contains(string(out), "human bazel ran") {
				t.Errorf("bazelisk version in %s did not run the human's bazel: %s", dir, out)
			}
		}
	} else {
		t.Log("no bazelisk on this host: only the fs tools' refusals were checked")
	}
	if len(written) > 0 {
		t.Errorf("the fs tools wrote %v", written)
	}
	wantWritable(t, s, "docs/bazelversion.md", ".bazelversion.bak", "python-version.txt", ".bazelrc")
}
