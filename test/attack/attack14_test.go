package attack

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// TestAttackReadProgramLoadsTheModelsCode (session 14, attack14): under
// the default policy, two allowed steps give a read program the model's
// code, through the places it looks for code relative to its working
// directory (the workspace): fs.write of a module, then shell.exec of a
// read program `python3 -c "import xct_tool"` (the operator's tool, on
// PYTHONPATH); and fs.write of a libc.so.6, then the example's read
// program `ls` with an LD_LIBRARY_PATH that ends in ":" (its empty entry
// is the working directory). On main the module ran, writing into the
// sandbox's writable: directory (outside the workspace a read is given
// read-only: nothing records or undoes it), and the dynamic loader read
// the model's libc ("file too short": a real library there is code in
// every program). Now children get PYTHONSAFEPATH=1 and search lists
// without the workspace (services/executor: withInterpreterDefaults,
// searchLists).
func TestAttackReadProgramLoadsTheModelsCode(t *testing.T) {
	t.Parallel()
	requireSandbox(t)
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s (make test-deps installs it): %v", python, err)
	}
	lib, cache := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(lib, "xct_tool.py"), []byte("print('the operator\\'s tool')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startBindCluster(t, withTools(t, "shell:\n"+
		"  set_env: {PYTHONPATH: "+lib+", LD_LIBRARY_PATH: \"/opt/xct-none:\"}\n"+
		"  sandbox: {read_only: ["+lib+"], writable: ["+cache+"]}\n"+
		"  binaries:\n"+
		"    - {name: ls, effect: read, idempotent: true}\n"+
		"    - {name: python3, path: "+python+", effect: read, allow_flags: [-c]}\n", ""))
	module := fmt.Sprintf("import os\nopen(os.path.join(%q, 'ran'), 'w').write('the model')\nprint('the model\\'s code')\n", cache)
	c.writeScript(t, "a.yaml", script(
		step("fs.write", fmt.Sprintf("{path: xct_tool.py, content: %q}", module)),
		step("shell.exec", `{argv: [python3, -c, "import xct_tool"]}`),
		step("fs.write", `{path: libc.so.6, content: "not a library"}`),
		step("shell.exec", "{argv: [ls]}"),
	))
	run := c.runToEnd(t, "alice", &xctv1.StartRunRequest{Goal: "g", Model: "scripted:a.yaml"})
	if got := stepErrors(run); len(got) != 4 || fmt.Sprint(got) != "[   ]" {
		t.Fatalf("the default policy's verdicts and the steps: %v", got)
	}
	if names, _ := os.ReadDir(cache); len(names) > 0 {
		t.Errorf("the model's module ran in a read program: %s written in its writable directory", names[0].Name())
	}
	if res := fmt.Sprint(run.GetSteps()[1].GetResponse()); !strings.Contains(res, "the operator's tool") {
		t.Errorf("python3 -c 'import xct_tool': %s", res)
	}
	if res := fmt.Sprint(run.GetSteps()[3].GetResponse()); strings.Contains(res, "error while loading shared libraries") || !strings.Contains(res, "xct_tool.py") {
		t.Errorf("ls: %s", res)
	}
}
