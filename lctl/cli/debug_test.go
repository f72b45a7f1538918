package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xct-dev/xct/internal/testutil"
	"github.com/xct-dev/xct/lctl/cli"
)

// chainsDir holds the example chains.
const chainsDir = "testdata/chains"

var debugURL = regexp.MustCompile(`Starting LCTL Debugger at (http://127\.0\.0\.1:\d+/)`)

// startDebug runs `lctl debug` in-process until the returned stop is
// called, which returns the exit code.
func startDebug(t *testing.T, args ...string) (url string, stdout, stderr *testutil.Buffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr = &testutil.Buffer{}, &testutil.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, append([]string{"debug", "--addr", "127.0.0.1:0", "--open=false"}, args...), cli.Env{Stdout: stdout, Stderr: stderr})
	}()
	stop = func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(20 * time.Second):
			t.Fatal("lctl debug did not stop")
			return -1
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if m := debugURL.FindStringSubmatch(stdout.String()); m != nil && strings.Contains(stdout.String(), "Press Ctrl-C") {
			return m[1], stdout, stderr, stop
		}
		select {
		case code := <-done:
			t.Fatalf("lctl debug exited %d before serving\n%s%s", code, stdout, stderr)
		case <-time.After(10 * time.Millisecond):
		}
	}
	stop()
	t.Fatalf("lctl debug printed no URL\n%s%s", stdout, stderr)
	return
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %s", url, raw)
	}
	return resp.StatusCode
}

func TestDebugServesFiles(t *testing.T) {
	v1, v2 := filepath.Join(chainsDir, "review-v1.lctl.json"), filepath.Join(chainsDir, "review-v2.lctl.json")
	url, stdout, stderr, stop := startDebug(t, v1, v2)
	out := stdout.String()
	for _, want := range []string{"- Chain: security-review-001\n", "- Events: 25\n", "- Duration: 45.2s\n", "- Agents: 3\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	var info struct {
		Mode   string
		Chains int
	}
	if code := getJSON(t, url+"api/info", &info); code != 200 || info.Mode != "file" || info.Chains != 2 {
		t.Fatalf("info %d %+v", code, info)
	}
	var diff struct{ Identical bool }
	if code := getJSON(t, url+"api/diff?a=security-review-001&b=security-review-002", &diff); code != 200 || diff.Identical {
		t.Fatalf("diff of v1 and v2: %d %+v", code, diff)
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	// The listener is closed after the graceful shutdown.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url+"api/info", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatal("still serving after stop")
	}
}

func TestDebugFileThatDoesNotParse(t *testing.T) {
	bad := filepath.Join(chainsDir, "bad", "truncated.lctl.json")
	url, _, stderr, stop := startDebug(t, bad)
	var info struct {
		LoadError *struct{ File, Message string } `json:"load_error"`
	}
	if code := getJSON(t, url+"api/info", &info); code != 200 || info.LoadError == nil || info.LoadError.File != bad {
		t.Fatalf("info %d %+v", code, info)
	}
	if !strings.Contains(stderr.String(), bad) || !strings.Contains(stderr.String(), info.LoadError.Message) {
		t.Fatalf("stderr does not name the problem:\n%s", stderr)
	}
	if code := stop(); code != cli.ExitUsage {
		t.Fatalf("exit %d, want %d (unreadable input)", code, cli.ExitUsage)
	}
}

func TestDebugBadUsage(t *testing.T) {
	busy, _, _, stop := startDebug(t, filepath.Join(chainsDir, "review-v1.lctl.json"))
	defer stop()
	busyAddr := strings.TrimSuffix(strings.TrimPrefix(busy, "http://"), "/")
	file := filepath.Join(chainsDir, "review-v1.lctl.json")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"debug"}, "name a chain file"},
		{[]string{"debug", "--nope", file}, "flag provided but not defined"},
		{[]string{"debug", "--open=maybe", file}, "invalid boolean"},
		{[]string{"debug", "--chain", "run-1"}, "served by the tracer"},
		{[]string{"debug", "-", "--open=false"}, "not stdin"},
		{[]string{"debug", "--addr", busyAddr, "--open=false", file}, "listen on"},
		{[]string{"debug", "--prices", filepath.Join(t.TempDir(), "none.yaml"), file}, "--prices"},
	} {
		code, stdout, stderr := run(t, nil, tc.args...)
		if code != cli.ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("lctl %s: exit %d, stderr %q, want 2 and %q (stdout %q)", strings.Join(tc.args, " "), code, stderr, tc.want, stdout)
		}
	}
}

// TestDebugAnswersOnlyLoopbackNames: lctl debug on loopback has no
// authentication, so a page of another site whose name was pointed at
// 127.0.0.1 (DNS rebinding) could read every chain, same-origin under its
// own name. A request whose Host is not a loopback name is refused (421),
// the page and the API alike; loopback names are served.
func TestDebugAnswersOnlyLoopbackNames(t *testing.T) {
	url, _, stderr, stop := startDebug(t, filepath.Join(chainsDir, "review-v1.lctl.json"))
	port := url[strings.LastIndex(url, ":")+1 : len(url)-1]
	ask := func(host, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, host := range []string{"evil.test:" + port, "evil.test", "127.0.0.1.evil.test:" + port, "localhost.evil.test:" + port} {
		for _, path := range []string{"api/chains", "api/chains/security-review-001/events", ""} {
			if code, body := ask(host, path); code != http.StatusMisdirectedRequest || strings.Contains(body, "security-review-001") {
				t.Errorf("Host %s, /%s: %d %.80q", host, path, code, body)
			}
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST:" + port, "127.0.0.2:" + port} {
		if code, body := ask(host, "api/chains"); code != http.StatusOK || !strings.Contains(body, "security-review-001") {
			t.Errorf("Host %s: %d %.80q", host, code, body)
		}
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
}
