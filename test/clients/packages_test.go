package clients

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xct-dev/xct/internal/auth"
)

// venvDir holds the virtual environment the packaged Python client is
// installed in (removed by TestMain).
var venvDir string

// copyTree copies the directory src to dst (which must not exist), so a
// package is built from a copy and the source tree stays clean (pip and
// npm pack build in place).
func copyTree(src, dst string) error {
	out, err := exec.Command("cp", "-R", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cp -R %s %s: %w\n%s", src, dst, err, out)
	}
	return nil
}

// installPythonClient installs gen/python as a user does, into a new
// virtual environment over Debian's site packages (grpcio, protobuf and
// yaml come from there; nothing is downloaded), and returns its python.
func installPythonClient() (string, error) {
	var err error
	if venvDir, err = os.MkdirTemp("", "xct-clients-venv-"); err != nil {
		return "", err
	}
	src := filepath.Join(venvDir, "src")
	if err := copyTree(filepath.Join(root, "gen", "python"), src); err != nil {
		return "", err
	}
	env := filepath.Join(venvDir, "venv")
	for _, argv := range [][]string{
		{systemPython, "-m", "venv", "--system-site-packages", env},
		{filepath.Join(env, "bin", "pip"), "install", "--quiet", "--no-index", "--no-build-isolation", src},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil { //nolint:gosec // the test's own argv
			return "", fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, out)
		}
	}
	return filepath.Join(env, "bin", "python"), nil
}

// The installed Python package is importable as xct_client outside the
// repository, carries the stubs, and calls the cluster with a token from
// the credentials file.
func TestPythonPackage(t *testing.T) {
	c := needCluster(t)
	script := `
import sys, xct_client
from xct_client import orchestrator_pb2, orchestrator_pb2_grpc
assert "/gen/python" not in xct_client.__file__, xct_client.__file__
who = xct_client.identity("dave", None, sys.argv[2])
orch = orchestrator_pb2_grpc.OrchestratorServiceStub(xct_client.channel(sys.argv[1], who))
runs = orch.ListRuns(orchestrator_pb2.ListRunsRequest(limit=5)).runs
print("runs", len(runs), "version", xct_client.__version__)
try:
    orchestrator_pb2_grpc.OrchestratorServiceStub(xct_client.channel(sys.argv[1], xct_client.Identity("nobody"))).ListRuns(orchestrator_pb2.ListRunsRequest())
except Exception as err:
    print("refused", xct_client.explain(err))
`
	r := runCmd(t, t.TempDir(), childEnv(), 60*time.Second, python, "-c", script, c.orchestrator, c.credentials)
	if r.code != 0 || !strings.Contains(r.stdout, "version 0.1.0") || !strings.Contains(r.stdout, "refused UNAUTHENTICATED") {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// gen/ts packs into an npm tarball (npm pack builds dist/ with types),
// installs into a new project, type-checks and calls the cluster.
func TestTypeScriptPackage(t *testing.T) {
	c := needCluster(t)
	work := t.TempDir()
	pkg, app := filepath.Join(work, "pkg"), filepath.Join(work, "app")
	if err := copyTree(filepath.Join(root, "gen", "ts"), pkg); err != nil {
		t.Fatal(err)
	}
	// The package's build tool (typescript) and runtime (@bufbuild/protobuf)
	// as `npm install` in gen/ts would bring them: the lock file's versions,
	// installed by make clients-deps.
	if err := os.Symlink(filepath.Join(tsDir, "node_modules"), filepath.Join(pkg, "node_modules")); err != nil {
		t.Fatal(err)
	}
	if r := runCmd(t, pkg, childEnv(), 120*time.Second, "npm", "pack", "--pack-destination", work); r.code != 0 {
		t.Fatalf("npm pack: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	tarball := filepath.Join(work, "xct-client-0.1.0.tgz")
	if err := os.MkdirAll(app, 0o750); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"package.json": `{"name": "app", "private": true, "type": "module"}`,
		"main.ts": `import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { OrchestratorService, type Run } from "@xct/client/xct/v1/orchestrator_pb.js";

const [addr, token] = process.argv.slice(2);
const orch = createClient(OrchestratorService, createGrpcTransport({ baseUrl: "http://" + addr }));
const res = await orch.listRuns({ limit: 5 }, { headers: { authorization: "Bearer " + token }, timeoutMs: 10000 });
const runs: Run[] = res.runs;
console.log("runs " + runs.length);
`,
		"tsconfig.json": `{"compilerOptions": {"target": "es2022", "module": "nodenext", "moduleResolution": "nodenext", "strict": true, "skipLibCheck": true, "types": ["node"], "outDir": "dist"}, "include": ["main.ts"]}`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(app, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if r := runCmd(t, app, childEnv(), 180*time.Second, "npm", "install", "--prefer-offline", "--no-audit", "--no-fund",
		tarball, "@connectrpc/connect@2.1.2", "@connectrpc/connect-node@2.1.2", "@types/node@20"); r.code != 0 {
		t.Fatalf("npm install: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(app, "node_modules", "@xct", "client", "dist", "xct", "v1", "orchestrator_pb.d.ts")); err != nil {
		t.Fatalf("the package has no type declarations: %v", err)
	}
	if r := runCmd(t, app, childEnv(), 120*time.Second, filepath.Join(tsDir, "node_modules", ".bin", "tsc"), "-p", "."); r.code != 0 {
		t.Fatalf("tsc against the installed package: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r := runCmd(t, app, childEnv(), 60*time.Second, "node", "dist/main.js", c.orchestrator, devToken(t, c, "dave"))
	if r.code != 0 || !strings.HasPrefix(r.stdout, "runs ") {
		t.Fatalf("node: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// devToken is a principal's token from the cluster's credentials file.
func devToken(t *testing.T, c *cluster, principal string) string {
	t.Helper()
	tok, err := auth.ClientToken("", principal, c.credentials)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
