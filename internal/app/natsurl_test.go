package app

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/xct-dev/xct/internal/grpcx"
	"github.com/xct-dev/xct/internal/testutil"
)

// Session 18 (ops18), issue 17: --nats was taken as given. A URL with a
// password in it (nats://user:PASSWORD@host) was logged ("waiting for
// NATS at nats://user:PASSWORD@…") and named in the NOT_SERVING reason
// every caller's refused call carries (UNAVAILABLE, answered before
// authentication); one that is not NATS's (http://…, a typo of the scheme)
// was waited for forever as "not reachable". Both are now refused before
// anything is logged or connected, naming the flag, never the secret.
func TestNATSURLIsCheckedBeforeItIsUsed(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-pw"
	for _, tc := range []struct {
		url, want string // want: "" accepted, else in the error
	}{
		{"nats://127.0.0.1:4222", ""},
		{"127.0.0.1:4222", ""},
		{"nats://a.example:4222, nats://b.example:4222,nats://c.example", ""},
		{"tls://nats.example:4222", ""},
		{"wss://nats.example/", ""},
		{"", "--nats is empty"},
		{"nats://orchestrator:" + secret + "@127.0.0.1:4222", "--nats nats://xxxxx@127.0.0.1:4222 carries credentials"},
		{"nats://" + secret + "@127.0.0.1:4222", "carries credentials"},
		{"nats://a:4222,nats://u:" + secret + "@b:4222", "carries credentials"},
		{"http://127.0.0.1:4222", `scheme "http" is not NATS's`},
		{"nast://127.0.0.1:4222", `scheme "nast" is not NATS's`},
		{"nats://", "names no host"},
		{"nats://127.0.0.1:4222/xct", "has no path or query"},
		{"nats://u:" + secret + "@127.0.0.1:4222/%zz", "is not a URL"},
	} {
		err := CheckNATSURL("--nats", tc.url)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v, want it accepted", tc.url, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want an error saying %q", tc.url, err, tc.want)
		case err != nil && strings.Contains(err.Error(), secret):
			t.Errorf("%q: the error shows the password: %v", tc.url, err)
		}
	}

	// The process refuses to start, and has logged nothing of it.
	var log testutil.Buffer
	var cfg Config
	cfg.NATSURL = "nats://orchestrator:" + secret + "@127.0.0.1:4222"
	cfg.OrchestratorListen = "127.0.0.1:0"
	cfg.Orchestrator.ScriptsDir = t.TempDir()
	cfg.Security = grpcx.Security{Plaintext: true}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := Start(ctx, cfg, []string{TargetOrchestrator}, slog.New(slog.NewTextHandler(&log, nil)), Options{})
	if err == nil {
		stopApp(a)
		t.Fatalf("started with credentials in --nats; the log: %s", log.String())
	}
	if !strings.Contains(err.Error(), "carries credentials") || strings.Contains(err.Error(), secret) {
		t.Fatalf("start: %v; want the URL refused without its password", err)
	}
	if strings.Contains(log.String(), secret) {
		t.Fatalf("the log shows the password: %s", log.String())
	}
}
