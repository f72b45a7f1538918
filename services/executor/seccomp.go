package executor

import (
	"encoding/binary"
	"os"
	"runtime"
)

// The seccomp filter every sandboxed program runs under (bwrap --seccomp):
// it refuses, with EPERM, the system calls a tool never needs and that are
// the usual doors into the kernel from a sandbox: debugging other
// processes, the kernel keyring, eBPF, perf events, userfaultfd, io_uring,
// module and kexec loading; on amd64 also the x32 ABI. A process of
// another architecture (32-bit code on a 64-bit host) is killed. Nested
// user namespaces are refused by bwrap --disable-userns.

// seccompDenied are the refused system calls, by architecture.
var seccompDenied = map[string][]uint32{
	"amd64": {
		101,      // ptrace
		310, 311, // process_vm_readv, process_vm_writev
		248, 249, 250, // add_key, request_key, keyctl
		321,      // bpf
		298,      // perf_event_open
		323,      // userfaultfd
		246, 320, // kexec_load, kexec_file_load
		175, 313, 176, // init_module, finit_module, delete_module
		425, 426, 427, // io_uring_setup, io_uring_enter, io_uring_register
		155, 167, 168, // pivot_root, swapon, swapoff
		169,      // reboot
		134,      // uselib
		136,      // ustat
		139,      // sysfs
		156,      // _sysctl
		163,      // acct
		212,      // lookup_dcookie
		303, 304, // name_to_handle_at, open_by_handle_at
	},
	"arm64": {
		117,      // ptrace
		270, 271, // process_vm_readv, process_vm_writev
		217, 218, 219, // add_key, request_key, keyctl
		280,      // bpf
		241,      // perf_event_open
		282,      // userfaultfd
		104, 294, // kexec_load, kexec_file_load
		105, 273, 106, // init_module, finit_module, delete_module
		425, 426, 427, // io_uring_setup, io_uring_enter, io_uring_register
		41, 224, 225, // pivot_root, swapon, swapoff
		142,      // reboot
		89,       // acct
		18,       // lookup_dcookie
		264, 265, // name_to_handle_at, open_by_handle_at
	},
}

// seccompSocket and seccompSocketpair are socket(2)'s and
// socketpair(2)'s numbers, by architecture: a sandbox that lives between
// calls may make no Unix socket but a stream or seqpacket pair
// (noUnixSockets).
var (
	seccompMemfdCreate = map[string]uint32{"amd64": 319, "arm64": 279}
	seccompSocket      = map[string]uint32{"amd64": 41, "arm64": 198}
	seccompSocketpair  = map[string]uint32{"amd64": 53, "arm64": 199}
)

// afUnix is AF_UNIX; sockStream, sockSeqpacket and sockTypeMask are
// SOCK_STREAM, SOCK_SEQPACKET and the bits of a socket type that are not
// flags (SOCK_CLOEXEC, SOCK_NONBLOCK).
const (
	afUnix        = 1
	sockStream    = 1
	sockSeqpacket = 5
	sockTypeMask  = 0xf
)

// auditArch is the AUDIT_ARCH value of the executor's architecture.
var auditArch = map[string]uint32{"amd64": 0xc000003e, "arm64": 0xc00000b7}

// BPF and seccomp constants (linux/filter.h, linux/seccomp.h).
const (
	bpfLdWAbs       = 0x20 // BPF_LD | BPF_W | BPF_ABS
	bpfJeqK         = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	bpfJgeK         = 0x35 // BPF_JMP | BPF_JGE | BPF_K
	bpfAndK         = 0x54 // BPF_ALU | BPF_AND | BPF_K
	bpfRetK         = 0x06 // BPF_RET | BPF_K
	seccompAllow    = 0x7fff0000
	seccompErrno    = 0x00050000
	seccompKillProc = 0x80000000
	eperm           = 1
	enosys          = 38  // ENOSYS
	eprotonosupport = 93  // EPROTONOSUPPORT
	ipprotoMPTCP    = 262 // IPPROTO_MPTCP
	x32SyscallBit   = 0x40000000
)

type sockFilter struct {
	code   uint16
	jt, jf uint8
	k      uint32
}

// seccompProgram is the filter for this architecture, as the bytes bwrap
// reads (an array of struct sock_filter); nil where there is none (then
// the sandbox runs without it, see docs/security.md). With noUnix it
// also refuses socket(AF_UNIX, ...): a process that outlives calls (a
// stdio MCP server's read-only instance) cannot connect to a socket
// another sandbox made in the workspace, and so cannot be handed a
// descriptor (SCM_RIGHTS) it could write the workspace through later.
// For the same reason it refuses socketpair(AF_UNIX, ...) but of stream
// and seqpacket sockets: a datagram socket of a pair can be disconnected
// from its peer (connect to AF_UNSPEC) and bound to an address (a path
// in a writable directory the write calls' instances share, an abstract
// one in a shared network namespace), where any process can send it
// descriptors. A stream or seqpacket pair (Python's asyncio and libuv
// make them) connects only the process's own: it can neither be
// disconnected nor listen.
func seccompProgram(noUnix bool) []byte {
	denied, ok := seccompDenied[runtime.GOARCH]
	if !ok {
		return nil
	}
	var prog []sockFilter
	// Load the architecture; anything else is killed.
	prog = append(prog,
		sockFilter{code: bpfLdWAbs, k: 4},
		sockFilter{code: bpfJeqK, jt: 1, jf: 0, k: auditArch[runtime.GOARCH]},
		sockFilter{code: bpfRetK, k: seccompKillProc},
		sockFilter{code: bpfLdWAbs, k: 0}, // the system call number
	)
	if runtime.GOARCH == "amd64" {
		prog = append(prog,
			sockFilter{code: bpfJgeK, jt: 0, jf: 1, k: x32SyscallBit},
			sockFilter{code: bpfRetK, k: seccompErrno | eperm},
		)
	}
	// MPTCP sockets, refused as a kernel without MPTCP refuses them (the
	// caller falls back to TCP: Go's listeners, curl): Landlock's TCP
	// rules do not apply to them (Linux 6.18), so a program that may not
	// bind a TCP port (sandboxenter.RefuseTCPBind) bound it, and listened
	// for TCP clients there, through an MPTCP socket.
	prog = append(prog,
		sockFilter{code: bpfJeqK, jt: 0, jf: 4, k: seccompSocket[runtime.GOARCH]},
		sockFilter{code: bpfLdWAbs, k: 32}, // args[2], its low half: the protocol
		sockFilter{code: bpfJeqK, jt: 0, jf: 1, k: ipprotoMPTCP},
		sockFilter{code: bpfRetK, k: seccompErrno | eprotonosupport},
		sockFilter{code: bpfLdWAbs, k: 0}, // the system call number again
	)
	// Memory files (memfd_create): shared memory that no tmpfs size
	// bounds and RLIMIT_AS does not count while unmapped, so a program
	// held RLIMIT_NOFILE of them, each up to RLIMIT_FSIZE (a terabyte
	// with the defaults). Refused as a kernel without them refuses
	// them (ENOSYS): glibc's callers, Chromium and systemd's tools fall
	// back to /dev/shm, which is sized (max_tmp_bytes).
	prog = append(prog,
		sockFilter{code: bpfJeqK, jt: 0, jf: 1, k: seccompMemfdCreate[runtime.GOARCH]},
		sockFilter{code: bpfRetK, k: seccompErrno | enosys},
	)
	if noUnix {
		prog = append(prog,
			sockFilter{code: bpfJeqK, jt: 0, jf: 4, k: seccompSocket[runtime.GOARCH]},
			sockFilter{code: bpfLdWAbs, k: 16}, // args[0], its low half: the domain, an int
			sockFilter{code: bpfJeqK, jt: 0, jf: 1, k: afUnix},
			sockFilter{code: bpfRetK, k: seccompErrno | eperm},
			sockFilter{code: bpfRetK, k: seccompAllow}, // another socket: not in the list below
			sockFilter{code: bpfJeqK, jt: 0, jf: 9, k: seccompSocketpair[runtime.GOARCH]},
			sockFilter{code: bpfLdWAbs, k: 16}, // args[0]: the domain
			sockFilter{code: bpfJeqK, jt: 1, jf: 0, k: afUnix},
			sockFilter{code: bpfRetK, k: seccompAllow}, // another domain's pair
			sockFilter{code: bpfLdWAbs, k: 24},         // args[1], its low half: the type and its flags
			sockFilter{code: bpfAndK, k: sockTypeMask},
			sockFilter{code: bpfJeqK, jt: 2, jf: 0, k: sockStream},
			sockFilter{code: bpfJeqK, jt: 1, jf: 0, k: sockSeqpacket},
			sockFilter{code: bpfRetK, k: seccompErrno | eperm},
			sockFilter{code: bpfRetK, k: seccompAllow},
		)
	}
	for i, nr := range denied {
		// Jump to the final "deny" when equal: it is after the remaining
		// comparisons and the "allow".
		toDeny := uint8(len(denied) - i) // the rest of the list, then allow
		prog = append(prog, sockFilter{code: bpfJeqK, jt: toDeny, jf: 0, k: nr})
	}
	prog = append(prog,
		sockFilter{code: bpfRetK, k: seccompAllow},
		sockFilter{code: bpfRetK, k: seccompErrno | eperm},
	)
	out := make([]byte, 0, 8*len(prog))
	for _, f := range prog {
		out = binary.LittleEndian.AppendUint16(out, f.code)
		out = append(out, f.jt, f.jf)
		out = binary.LittleEndian.AppendUint32(out, f.k)
	}
	return out
}

// seccompPipe makes the pipe of seccompFile (a variable: a test makes it
// fail, as running out of descriptors would).
var seccompPipe = os.Pipe

// seccompFile is a pipe holding the filter, for bwrap to read to its end.
func seccompFile(noUnix bool) (*os.File, error) {
	prog := seccompProgram(noUnix)
	if prog == nil {
		return nil, nil
	}
	r, w, err := seccompPipe()
	if err != nil {
		return nil, err
	}
	_, err = w.Write(prog) // far below a pipe's buffer
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	return r, nil
}
