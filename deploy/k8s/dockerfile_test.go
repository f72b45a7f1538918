package k8s

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// parseDockerfile parses the repository's Dockerfile with BuildKit's own
// parser, running its lint rules; a lint warning is an error.
func parseDockerfile(t *testing.T) []instructions.Stage {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	ast, err := parser.Parse(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	for _, w := range ast.Warnings {
		t.Errorf("Dockerfile: %s", w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, desc, _, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		t.Errorf("Dockerfile:%d: %s: %s", line, rule, msg)
	}})
	stages, _, err := instructions.Parse(ast.AST, lint)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	return stages
}

// TestDockerfile checks what the Dockerfile promises, since no container
// engine builds it here: a build stage that compiles a static, stripped,
// reproducible binary with the Go of go.mod, and a final stage that is a
// distroless static (or scratch) image running that binary as a non-root
// numeric user, with nothing fetched from URLs.
func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a final stage", len(stages))
	}
	names := map[string]bool{}
	for i, s := range stages {
		if s.BaseName != "scratch" && !names[s.BaseName] {
			if name, tag := splitImage(s.BaseName); tag == "" || tag == "latest" || strings.Contains(tag, "$") {
				t.Errorf("stage %d: base image %s (%s) is not pinned to a tag", i, s.BaseName, name)
			}
		}
		for _, cmd := range s.Commands {
			if add, ok := cmd.(*instructions.AddCommand); ok {
				for _, src := range add.SourcePaths {
					if strings.Contains(src, "://") || strings.HasPrefix(src, "git@") {
						t.Errorf("stage %d: ADD fetches %s from the network", i, src)
					}
				}
			}
		}
		names[s.Name] = true
	}

	build, final := stages[len(stages)-2], stages[len(stages)-1]
	var out string
	for _, cmd := range build.Commands {
		run, ok := cmd.(*instructions.RunCommand)
		if !ok {
			continue
		}
		line := strings.Join(run.CmdLine, " ")
		if !strings.Contains(line, "go build") {
			continue
		}
		for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/xct"} {
			if !strings.Contains(line, want) {
				t.Errorf("go build does not use %s: %s", want, line)
			}
		}
		ld := regexp.MustCompile(`-ldflags[= ]"?([^"]*)"?`).FindStringSubmatch(line)
		if ld == nil || !slices.Contains(strings.Fields(ld[1]), "-s") || !slices.Contains(strings.Fields(ld[1]), "-w") {
			t.Errorf("go build does not strip the binary (-ldflags \"-s -w\"): %s", line)
		}
		if o := regexp.MustCompile(`-o\s+(\S+)`).FindStringSubmatch(line); o != nil {
			out = o[1]
		}
	}
	if out == "" {
		t.Fatalf("stage %q has no `go build -o BINARY ./cmd/xct`", build.Name)
	}
	if name, tag := splitImage(build.BaseName); name != "golang" && !strings.HasSuffix(name, "/golang") {
		t.Errorf("the build stage is %s, want the golang image", build.BaseName)
	} else if goVersion := goDirective(t); !versionAtLeast(tag, goVersion) {
		t.Errorf("the build stage's Go is %s, go.mod needs %s", tag, goVersion)
	}

	if final.BaseName != "scratch" && !strings.HasPrefix(final.BaseName, "gcr.io/distroless/static") {
		t.Errorf("the final stage is %s, want scratch or gcr.io/distroless/static*", final.BaseName)
	}
	var user, entrypoint string
	var copied []string
	for _, cmd := range final.Commands {
		switch c := cmd.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.EntrypointCommand:
			if c.PrependShell {
				t.Errorf("ENTRYPOINT is in shell form, and the final stage has no shell")
			}
			if len(c.CmdLine) > 0 {
				entrypoint = c.CmdLine[0]
			}
		case *instructions.CopyCommand:
			if c.From != "" && !names[c.From] {
				t.Errorf("COPY --from=%s names no stage", c.From)
			}
			if c.From == build.Name && slices.Contains(c.SourcePaths, out) {
				dest := c.DestPath
				if strings.HasSuffix(dest, "/") {
					dest += path.Base(out)
				}
				copied = append(copied, dest)
			}
		case *instructions.RunCommand:
			t.Errorf("the final stage runs %v: it has no shell to run it with", c.CmdLine)
		}
	}
	uid, gid, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %q is not a non-root numeric uid (Kubernetes runAsNonRoot can only verify numbers)", user)
	}
	if _, err := strconv.Atoi(gid); gid != "" && err != nil {
		t.Errorf("USER %q has a non-numeric group", user)
	}
	if !slices.Contains(copied, entrypoint) {
		t.Errorf("ENTRYPOINT %q is not the binary copied from the build stage (%v)", entrypoint, copied)
	}
	// The manifests' pods run as the image's user.
	m := mustRender(t, "overlays/prod")
	for _, name := range xctServices {
		w, _ := m.workload(name)
		sc := w.template.Spec.SecurityContext
		if sc == nil || sc.RunAsUser == nil || fmt.Sprint(*sc.RunAsUser) != uid {
			t.Errorf("%s does not set runAsUser to the image's user %s", w, uid)
		}
	}
}

// goDirective returns the go version XCT's go.mod requires.
func goDirective(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go\s+(\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	return string(m[1])
}

// versionAtLeast compares dotted versions ("1.26.8"); a tag may carry a
// suffix ("1.26.8-bookworm").
func versionAtLeast(tag, min string) bool {
	tag, _, _ = strings.Cut(tag, "-")
	a, b := strings.Split(tag, "."), strings.Split(min, ".")
	for i := range max(len(a), len(b)) {
		var x, y int
		var err error
		if i < len(a) {
			if x, err = strconv.Atoi(a[i]); err != nil {
				return false
			}
		}
		if i < len(b) {
			y, _ = strconv.Atoi(b[i])
		}
		if x != y {
			return x > y
		}
	}
	return true
}

// TestDockerignore checks the build context with Docker's own matcher:
// every file `go build ./cmd/xct` reads is in it (the module's Go files,
// go.mod, go.sum and embedded files), and the repository's history, build
// output, local data and other modules are not.
func TestDockerignore(t *testing.T) {
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	ignored := func(p string) bool {
		ok, err := pm.MatchesOrParentMatches(p)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for _, p := range []string{".git/HEAD", "bin/xct", ".xct/nats/x", "e2e.test", "services/tracer/tracer.test", "deploy/k8s/go.mod", "tools/go.mod"} {
		if !ignored(p) {
			t.Errorf("%s is in the build context", p)
		}
	}
	for _, p := range buildInputs(t) {
		if ignored(p) {
			t.Errorf("%s is needed by go build but .dockerignore leaves it out", p)
		}
	}
}

// buildInputs lists, relative to the repository, the files of XCT's main
// module that go build reads: go.mod, go.sum, non-test Go files and the
// files they embed. Directories of other modules are skipped.
func buildInputs(t *testing.T) []string {
	t.Helper()
	out := []string{"go.mod", "go.sum"}
	embed := regexp.MustCompile(`^//go:embed\s+(.+)$`)
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || fileExists(filepath.Join(p, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		out = append(out, rel)
		file, err := os.Open(p)
		if err != nil {
			return err
		}
		defer file.Close()
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			if m := embed.FindStringSubmatch(strings.TrimSpace(sc.Text())); m != nil {
				for _, e := range strings.Fields(m[1]) {
					out = append(out, path.Join(path.Dir(rel), e))
				}
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("found only %v in %s: is it XCT's repository?", out, repoRoot)
	}
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
