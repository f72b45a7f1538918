package k8s

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"testing"
)

// repoRoot is the XCT repository, two levels up from this module.
const repoRoot = "../.."

// flagDefiners are the flag.FlagSet methods that define a flag, with the
// position of the flag's name among their arguments.
var flagDefiners = map[string]int{
	"Bool": 0, "Duration": 0, "Float64": 0, "Int": 0, "Int64": 0, "String": 0, "Uint": 0, "Uint64": 0,
	"Func": 0, "BoolFunc": 0, "Var": 1, "TextVar": 1,
	"BoolVar": 1, "DurationVar": 1, "Float64Var": 1, "IntVar": 1, "Int64Var": 1, "StringVar": 1, "UintVar": 1, "Uint64Var": 1,
}

// serveFlags returns the flags of `xct serve`, read from XCT's source (this
// module does not build XCT): the flags cmdServe defines and those of every
// RegisterFlags method of the app and the four services, which cmdServe
// registers through app.Config.RegisterFlags.
func serveFlags(t testing.TB) map[string]bool {
	t.Helper()
	flags := map[string]bool{}
	collect := func(pattern string, funcName func(*ast.FuncDecl) bool) { collectFlags(t, flags, pattern, funcName) }
	isRegisterFlags := func(fn *ast.FuncDecl) bool { return fn.Recv != nil && fn.Name.Name == "RegisterFlags" }
	collect("cmd/xct/serve.go", func(fn *ast.FuncDecl) bool { return fn.Name.Name == "cmdServe" })
	collect("internal/app/*.go", isRegisterFlags)
	collect("internal/grpcx/*.go", isRegisterFlags) // TLS, plaintext, rate limits
	collect("internal/auth/*.go", isRegisterFlags)  // tokens file, OIDC
	for _, s := range xctServices {
		collect("services/"+s+"/*.go", isRegisterFlags)
	}
	for _, must := range []string{"target", "nats", "replicas"} {
		if !flags[must] {
			t.Fatalf("found no --%s flag in XCT's source: has the flag code moved? (found %v)", must, flags)
		}
	}
	return flags
}

// provisionFlags are the flags `xct nats provision` defines.
func provisionFlags(t testing.TB) map[string]bool {
	t.Helper()
	flags := map[string]bool{}
	collectFlags(t, flags, "cmd/xct/nats.go", func(fn *ast.FuncDecl) bool { return fn.Name.Name == "cmdNATSProvision" })
	for _, must := range []string{"nats", "replicas", "nats-credentials"} {
		if !flags[must] {
			t.Fatalf("found no --%s flag of xct nats provision: has the flag code moved? (found %v)", must, flags)
		}
	}
	return flags
}

// collectFlags adds to flags the names of the flags defined in the
// functions of the files at pattern that funcName picks.
func collectFlags(t testing.TB, flags map[string]bool, pattern string, funcName func(*ast.FuncDecl) bool) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, pattern))
	if err != nil || len(files) == 0 {
		t.Fatalf("no XCT source at %s (err %v)", pattern, err)
	}
	for _, file := range files {
		if filepath.Ext(file) != ".go" || len(file) > 8 && file[len(file)-8:] == "_test.go" {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !funcName(fn) {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				i, ok := flagDefiners[sel.Sel.Name]
				if !ok || len(call.Args) <= i {
					return true
				}
				if lit, ok := call.Args[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if name, err := strconv.Unquote(lit.Value); err == nil {
						flags[name] = true
					}
				}
				return true
			})
		}
	}
}
