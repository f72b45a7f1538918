package executor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// unsandboxed names the tools of c whose programs run without a sandbox:
// shell.exec and stdio MCP servers with "sandbox: none".
func (c *ToolsConfig) unsandboxed() []string {
	var out []string
	if c.Shell != nil && c.Shell.Sandbox.disabled() {
		out = append(out, "shell.exec")
	}
	for _, m := range c.MCP {
		if m.Command != "" && m.Sandbox.disabled() {
			out = append(out, "MCP server "+m.Name)
		}
	}
	return out
}

// checkUnsandboxed refuses tools without a sandbox while their programs,
// which run as the executor's user, could read its secrets: a secrets
// file readable now (a program would open it the same way), or a secret
// in the environment of a process running as root (root reads any
// process's /proc/<pid>/environ and memory). A non-root executor marks
// itself non-dumpable, so a program of its user cannot read its
// environment or memory through /proc or ptrace. The operator may accept
// the exposure (cfg.UnsandboxedReadsSecrets); it is logged.
func checkUnsandboxed(cfg Config, tc *ToolsConfig, log *slog.Logger) error {
	tools := tc.unsandboxed()
	if len(tools) == 0 {
		return nil
	}
	var exposed []string
	for _, path := range cfg.SecretFiles {
		if path == "" {
			continue
		}
		if f, err := os.Open(path); err == nil {
			_ = f.Close()
			exposed = append(exposed, path)
		}
	}
	if cfg.SecretsInEnv && os.Geteuid() == 0 {
		exposed = append(exposed, "the environment (running as root: a program reads any process's)")
	}
	if err := nonDumpable(); err != nil {
		exposed = append(exposed, fmt.Sprintf("this process's environment and memory (not made non-dumpable: %v)", err))
	}
	if len(exposed) == 0 {
		return nil
	}
	if !cfg.UnsandboxedReadsSecrets {
		return fmt.Errorf("%w: %s run without a sandbox (sandbox: none) as the executor's user, and could read its secrets: %s; "+
			"sandbox them, keep the secrets out of their reach (a credentials file removed after start, XCT_NATS_PASSWORD as a non-root user), "+
			"or accept it with --unsandboxed-reads-secrets",
			ErrToolsConfig, strings.Join(tools, ", "), strings.Join(exposed, ", "))
	}
	log.Error("SECURITY: tools without a sandbox can read the executor's secrets (accepted with --unsandboxed-reads-secrets)",
		"tools", strings.Join(tools, ", "), "secrets", strings.Join(exposed, ", "))
	return nil
}

// nonDumpable clears the process's dumpable flag (prctl PR_SET_DUMPABLE
// 0): its /proc/<pid> files belong to root and another process of the
// same user may not ptrace it. Children start dumpable again at exec.
func nonDumpable() error {
	const prSetDumpable = 4
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// checkSandboxMounts refuses a sandbox whose read_only or writable host
// paths hold a file of the executor's secrets (cfg.SecretFiles): every
// program of that sandbox would read it (xct dev keeps the NATS
// passwords beside the workspace, so a parent of the workspace mounted
// for a toolchain under it brought them in). Paths are compared with
// their symbolic links resolved.
func checkSandboxMounts(cfg Config, tc *ToolsConfig) error {
	var secrets []string
	for _, p := range cfg.SecretFiles {
		if p == "" {
			continue
		}
		if abs, err := filepath.Abs(p); err == nil {
			secrets = append(secrets, realOrSelf(abs))
		}
	}
	if len(secrets) == 0 {
		return nil
	}
	var errs []error
	check := func(what string, sc *SandboxConfig) {
		if sc == nil || sc.disabled() {
			return
		}
		for _, list := range []struct {
			key   string
			paths []string
		}{{"read_only", sc.ReadOnly}, {"writable", sc.Writable}} {
			for _, p := range list.paths {
				dir := realOrSelf(p)
				for _, s := range secrets {
					if under(dir, s) {
						errs = append(errs, fmt.Errorf("%w: %s's sandbox mounts %s (%s), which holds the executor's secret %s: every program there could read it; name a narrower path",
							ErrToolsConfig, what, p, list.key, s))
					}
				}
			}
		}
	}
	if tc.Shell != nil {
		check("shell.exec", tc.Shell.Sandbox)
	}
	for _, m := range tc.MCP {
		if m.Command != "" {
			check("MCP server "+m.Name, m.Sandbox)
		}
	}
	return errors.Join(errs...)
}
