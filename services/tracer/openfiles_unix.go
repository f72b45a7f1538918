//go:build unix

package tracer

import "syscall"

// openFilesLimit bounds the chain files kept open for appending, the least
// recently written closed past it: a quarter of the process's limit on open
// files, between 64 and 4096. (With a limit of 256 and 256 runs writing,
// every batch reopened files: the opens were 40% of the tracer's CPU.)
func openFilesLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 256
	}
	return int(min(max(rl.Cur/4, 64), 4096))
}
