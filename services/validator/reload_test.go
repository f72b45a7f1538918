package validator_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/services/validator"
)

// logRecorder keeps the records logged through it.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// count counts the records at level whose message contains text.
func (r *logRecorder) count(level slog.Level, text string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.records {
		if rec.Level == level && strings.Contains(rec.Message, text) {
			n++
		}
	}
	return n
}

const (
	fsOnly   = "rules:\n  - id: allow-fs\n    effect: allow\n    tools: [\"fs.*\"]\n"
	fsShell  = "rules:\n  - id: allow-fs\n    effect: allow\n    tools: [\"fs.*\"]\n  - id: allow-shell\n    effect: allow\n    tools: [\"shell.*\"]\n"
	brokenWh = "rules:\n  - id: allow-fs\n    effect: allow\n    when: 'args.'\n"
)

// writeInPlace replaces the file's content the way editors and mounted
// ConfigMaps do: a new file renamed over the old one, so the watcher sees
// the old or the new content, never a half-written one (a truncated file
// read mid-write is a different broken policy, logged as a problem of its
// own).
func writeInPlace(tb testing.TB, path, text string) {
	tb.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}

// TestHotReload checks that a changed policy file is installed while the
// service runs, that a broken or missing file keeps the last good policy
// and is logged at Error level once per problem, and that fixing it is
// picked up again.
func TestHotReload(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "policy.yaml", fsOnly)
	logs := &logRecorder{}
	s, err := validator.NewWithCatalog(validator.Config{PolicyFile: path, PolicyReload: 10 * time.Millisecond},
		catalog.Static(testTools()...), slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	shell := request(t, "shell.exec", map[string]any{"command": "ls"})
	checkVerdict(t, validate(t, s, shell), deny, "POLICY_DENIED", "default-deny")

	writeInPlace(t, path, fsShell)
	testutil.Eventually(t, time.Minute, func() error {
		if v := validate(t, s, shell); v.GetDecision() != allow {
			return fmt.Errorf("decision %v under %s", v.GetDecision(), v.GetPolicyVersion())
		}
		return nil
	})
	good := s.PolicyVersion()
	if good != mustParse(t, fsShell).Version() {
		t.Fatalf("version %s is not the new file's", good)
	}

	// A broken change is refused with its position, and logged once.
	writeInPlace(t, path, brokenWh)
	testutil.Eventually(t, time.Minute, func() error {
		if n := logs.count(slog.LevelError, "policy change refused"); n != 1 {
			return fmt.Errorf("%d error records", n)
		}
		return nil
	})
	for range 3 {
		err := s.ReloadPolicy()
		if !errors.Is(err, validator.ErrInvalidPolicy) || !strings.Contains(err.Error(), path+":4: ") {
			t.Fatalf("ReloadPolicy = %v, want the broken line", err)
		}
	}
	if n := logs.count(slog.LevelError, "policy change refused"); n != 1 {
		t.Errorf("%d error records for one broken change, want 1", n)
	}
	if s.PolicyVersion() != good {
		t.Fatal("a broken change replaced the policy")
	}
	checkVerdict(t, validate(t, s, shell), allow, "", "allow-shell")

	// A file that disappears keeps the last good policy too.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, func() error {
		if n := logs.count(slog.LevelError, "unreadable"); n != 1 {
			return fmt.Errorf("%d error records", n)
		}
		return nil
	})
	if err := s.ReloadPolicy(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReloadPolicy = %v", err)
	}
	if n := logs.count(slog.LevelError, "unreadable"); n != 1 || s.PolicyVersion() != good {
		t.Errorf("%d error records, version %s", n, s.PolicyVersion())
	}

	// Fixed: installed again.
	writeInPlace(t, path, fsOnly)
	testutil.Eventually(t, time.Minute, func() error {
		if v := validate(t, s, shell); v.GetDecision() != deny {
			return fmt.Errorf("decision %v", v.GetDecision())
		}
		return nil
	})
	if logs.count(slog.LevelInfo, "validator policy reloaded") < 2 {
		t.Error("reloads are not logged")
	}
}

// TestReloadKeepsValidationsWhole flips the policy file between two
// versions while proposals are judged: every verdict is wholly the old
// policy's or wholly the new one's.
func TestReloadKeepsValidationsWhole(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "policy.yaml", fsOnly)
	s, err := validator.NewWithCatalog(validator.Config{PolicyFile: path}, catalog.Static(testTools()...), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]xctv1.VerdictDecision{
		mustParse(t, fsOnly).Version():  deny,
		mustParse(t, fsShell).Version(): allow,
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				v := validate(t, s, request(t, "shell.exec", map[string]any{"command": "ls"}))
				if d, ok := want[v.GetPolicyVersion()]; !ok || d != v.GetDecision() {
					t.Errorf("verdict %v under version %s", v.GetDecision(), v.GetPolicyVersion())
					return
				}
			}
		})
	}
	for i := range 20 {
		text := fsShell
		if i%2 == 1 {
			text = fsOnly
		}
		writeInPlace(t, path, text)
		if err := s.ReloadPolicy(); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
}
