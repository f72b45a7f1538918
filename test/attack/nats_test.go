package attack

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/catalog"
	"github.com/xct-dev/xct/internal/eventlog"
	"github.com/xct-dev/xct/internal/testutil"
)

// natsAttack is what a program with the network sends to NATS: connect
// without credentials, reclassify fs.write as a read in the tool catalog
// (the validator judges with it), forge a chain's next event, delete the
// LCTL stream; then it prints whatever the server answered.
func natsAttack(port string) string {
	const forged = `{"name":"fs.write","effect":"EFFECT_CLASS_READ"}`
	proto := fmt.Sprintf(`CONNECT {"verbose":false,"pedantic":false}\r\n`+
		`PUB $KV.%s.fs.write %d\r\n%s\r\n`+
		`PUB %s 2\r\n{}\r\n`+
		`PUB $JS.API.STREAM.DELETE.LCTL 0\r\n\r\nPING\r\n`,
		catalog.Bucket, len(forged), forged, eventlog.Subject("run-forged"))
	// The server's INFO is read first and a write the server refuses
	// does not end the shell (SIGPIPE ignored): its answer is printed.
	return fmt.Sprintf(`trap '' PIPE; exec 3<>/dev/tcp/127.0.0.1/%s; IFS= read -r info <&3; echo "$info"; printf '%s' >&3; timeout 5 cat <&3; echo; env; cat ../dev/nats.yaml`, port, proto)
}

// Attack (session 6, redteam: "NATS has no authentication"): a program
// run by an allowed tool whose sandbox has the network shares the
// executor's network, so it reaches the NATS port. It has no credentials
// (none in its environment, none on a path it can read), and NATS lets
// nobody in without: the catalog, the chains and the stream are as they
// were.
func TestAttackSandboxedProgramCannotWriteToNATS(t *testing.T) {
	t.Parallel()
	requireSandbox(t)
	tools := `shell:
  timeout: 10s
  sandbox: {network: true}
  binaries:
    - {name: bash, effect: irreversible, any_flags: true}
`
	c := startBindCluster(t, withTools(t, tools, permissivePolicy))
	u, err := url.Parse(c.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	// Where xct dev keeps the NATS passwords: beside the workspace.
	devDir := filepath.Join(filepath.Dir(c.workspace), "dev")
	if err := os.MkdirAll(devDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(devDir, "nats.yaml"), []byte("executor: "+testutil.NATSUsers()["executor"]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admin, err := nats.Connect(c.natsURL, testutil.Admin())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, catalog.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	before, err := kv.Get(ctx, "fs.write")
	if err != nil {
		t.Fatal(err)
	}

	c.writeScript(t, "a.yaml", script(step("shell.exec", fmt.Sprintf("{argv: [bash, -c, %q]}", natsAttack(port)))))
	run := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
	if got := stepErrors(run); fmt.Sprint(got) != "[]" {
		t.Fatalf("steps %v: the program did not run", got)
	}
	res, _ := run.GetSteps()[0].GetResponse().GetSuccess().GetResult().AsInterface().(map[string]any)
	stdout, _ := res["stdout"].(string)
	stderr, _ := res["stderr"].(string)
	// It reached the server (the attack is real) and was turned away.
	if !strings.Contains(stdout, "INFO {") || !strings.Contains(stdout, "Authorization Violation") {
		t.Fatalf("the program's conversation with NATS:\nstdout %q\nstderr %q", stdout, stderr)
	}
	if strings.Contains(stdout, "PONG") || strings.Contains(stdout, "+OK") {
		t.Fatalf("NATS accepted the program's connection: %q", stdout)
	}
	// No credentials in its environment, none at xct dev's path.
	for _, secret := range []string{"XCT_NATS", testutil.NATSUsers()["executor"]} {
		if strings.Contains(stdout, secret) {
			t.Errorf("the program saw %q: %q", secret, stdout)
		}
	}
	if !strings.Contains(stderr, "No such file or directory") {
		t.Errorf("the credentials file beside the workspace: stderr %q", stderr)
	}

	after, err := kv.Get(ctx, "fs.write")
	if err != nil {
		t.Fatal(err)
	}
	if after.Revision() != before.Revision() || string(after.Value()) != string(before.Value()) {
		t.Errorf("the catalog's fs.write changed: %s -> %s", before.Value(), after.Value())
	}
	if strings.Contains(string(after.Value()), "EFFECT_CLASS_READ") {
		t.Errorf("fs.write is a read now: %s", after.Value())
	}
	s, err := js.Stream(ctx, eventlog.StreamName)
	if err != nil {
		t.Fatalf("the LCTL stream: %v", err)
	}
	if _, err := s.GetLastMsgForSubject(ctx, eventlog.Subject("run-forged")); err == nil {
		t.Error("the forged chain event was stored")
	}
}
