package attack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lctlv1 "github.com/xct-dev/xct/gen/lctl/v1"
	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/app"
	"github.com/xct-dev/xct/internal/testutil"
)

// Session 19 (attack19b): a plain SHA-256 of content whose secret the
// chain keeps from its readers lets any reader confirm guesses of it
// offline (a file whose only unknown is a short password). Session 18
// keyed an approval's bound digest where the preview was redacted; the
// fs tools' results still reported plain digests of such content: fs.read's
// checksum of a file whose content the chain shows redacted, fs.write's
// checksum of content with a secret (its arguments redacted) and
// previous_checksum of the file with a secret it replaced, fs.delete's
// and fs.move's checksum of a file the chain never shows; and an
// approval's bound digest was plain where the diff did not reach the
// secret's line (a change further down the file), as was the digest a
// move's preview names in its text. Each now reaches the chain only as
// the digest's redaction marker.
func TestAttackChainHoldsNoPlainDigestOfASecret(t *testing.T) {
	t.Parallel()
	const policy = `rules:
  - {id: allow-changes, effect: allow, effects: [read, reversible]}
  - id: held-needs-a-human
    effect: require_approval
    tools: ["fs.write", "fs.delete", "fs.move"]
    when: '[has(args.path) ? args.path : "", has(args.from) ? args.from : ""].exists(p, p.startsWith("held/"))'
`
	c := startBindCluster(t, withTools(t, "", policy))
	tracer := lctlv1.NewTracerServiceClient(c.creds.Dial(t, c.app.Addr(app.TargetTracer), "dev"))
	if err := os.MkdirAll(filepath.Join(c.workspace, "held"), 0o755); err != nil {
		t.Fatal(err)
	}
	// far holds its secret on the first line; the approved write changes
	// the last, more lines down than a diff's context shows.
	far := "db_password: far-w8x2\n"
	for i := range 12 {
		far += fmt.Sprintf("line %d\n", i)
	}
	files := map[string]string{
		"read.yaml":      "host: db\ndb_password: hunter2-q7\n",
		"replaced.yaml":  "db_password: swap-k3m9\n",
		"deleted.yaml":   "db_password: gone-p4t1\n",
		"moved.yaml":     "db_password: away-c8v5\n",
		"held/far.yaml":  far,
		"held/move.yaml": "db_password: held-r2d6\n",
	}
	for p, content := range files {
		if err := os.WriteFile(filepath.Join(c.workspace, p), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const written = "db_password: new-j6h3\n"
	secretSums := map[string]string{"the content written": written}
	for p, content := range files {
		secretSums[p] = content
	}
	for what, content := range secretSums {
		sum := sha256.Sum256([]byte(content))
		secretSums[what] = hex.EncodeToString(sum[:])
	}
	farChanged := strings.Replace(far, "line 11\n", "line eleven\n", 1)
	for _, tc := range []struct {
		name   string
		steps  []string
		review bool // the run's one step waits for bob
	}{
		{"reads, writes, deletes and moves", []string{
			step("fs.read", `{path: read.yaml}`),
			step("fs.write", fmt.Sprintf(`{path: new.yaml, content: %q}`, written)),
			step("fs.write", `{path: replaced.yaml, content: "rotated\n"}`),
			step("fs.delete", `{path: deleted.yaml}`),
			step("fs.move", `{from: moved.yaml, to: moved2.yaml}`),
		}, false},
		{"an approved write whose diff does not show the secret", []string{
			step("fs.write", fmt.Sprintf(`{path: held/far.yaml, content: %q}`, farChanged)),
		}, true},
		{"an approved move", []string{
			step("fs.move", `{from: held/move.yaml, to: held/move2.yaml}`),
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.writeScript(t, "a.yaml", script(tc.steps...))
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			resp, err := c.orchestratorAs(t, "alice").StartRun(ctx, &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetRun().GetRunId()
			listed := ""
			if tc.review {
				a := waitApproval(t, c, "bob", id)
				listed = a.GetPreview().String()
				if _, err := c.validatorAs(t, "bob").DecideApproval(ctx, &xctv1.DecideApprovalRequest{RunId: id, Step: "1", Approve: true, Reason: "ok"}); err != nil {
					t.Fatal(err)
				}
			}
			run := c.waitRun(t, "alice", id)
			if got := stepErrors(run); len(got) != len(tc.steps) || strings.Join(got, "") != "" {
				t.Fatalf("the run's steps: %q, want %d successes", got, len(tc.steps))
			}
			var chainText string
			testutil.Eventually(t, 30*time.Second, func() error {
				chain, err := tracer.GetChain(ctx, &lctlv1.GetChainRequest{ChainId: id})
				if err != nil {
					return err
				}
				calls := 0
				for _, ev := range chain.GetEvents() {
					if ev.GetType() == "tool_call" {
						calls++
					}
				}
				if calls != len(tc.steps) {
					return fmt.Errorf("%d tool_calls on %s, want %d", calls, id, len(tc.steps))
				}
				chainText = chain.String()
				return nil
			})
			if !strings.Contains(chainText, "[REDACTED ") {
				t.Errorf("no redaction marker on the chain of %s", id)
			}
			for what, plain := range secretSums {
				if strings.Contains(chainText, plain) {
					t.Errorf("the plain digest of %s (which holds a secret) is on the chain", what)
				}
				if strings.Contains(listed, plain) {
					t.Errorf("the plain digest of %s (which holds a secret) is in the approver's list", what)
				}
			}
		})
	}
}
