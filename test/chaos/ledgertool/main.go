// Command ledgertool is the fault-injection suite's outside world: a
// ToolService server (its own OS process) whose every real effect is one
// line appended, and fsynced, to a ledger file before it answers. The suite
// reads the ledger after a run to count effects per step id and per
// operation: a line is an effect that happened, whatever the caller heard.
//
// Two tools:
//   - charge: not idempotent. Every invocation is an effect.
//   - put: idempotent, as a PUT of the record named by op is: an op already
//     in the ledger answers {"acted": false} and appends nothing, whatever
//     the step id, across restarts of this process (the ledger is read
//     back at start). work_ms is how long it takes, not what it writes.
//
// After the effect is written, an invocation waits work_ms milliseconds
// before it answers, so a fault can land between the effect and the answer:
// the window in which a caller cannot know whether the tool acted.
//
// With -trap DIR the suite can stop the world at the worst instants of one
// invocation (test/chaos traps_test.go): it arms a trap by writing DIR/arm
// ("before" or "after"); the next invocation takes it (a rename: one
// invocation only) and, before its effect or right after the effect is
// fsynced, writes DIR/fired (the op) and waits for DIR/release while the
// suite kills or pauses a process. An invocation trapped "before" whose
// caller went away meanwhile does not act, as a tool whose call was never
// started would not.
//
// It is a test tool: plaintext gRPC, on the address it is told (loopback or
// a private address inside the suite's network namespaces; nothing leaves
// the machine).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
)

// Entry is one ledger line: one real effect.
type Entry struct {
	Key  string `json:"key"`  // the idempotency key: XCT's step id
	Op   string `json:"op"`   // the model's operation id ("run/n")
	Tool string `json:"tool"` // charge or put
	PID  int    `json:"pid"`  // the process that acted
	At   int64  `json:"at"`   // when, in Unix milliseconds
}

type server struct {
	xctv1.UnimplementedToolServiceServer
	mu   sync.Mutex
	f    *os.File
	seen map[string]bool // put: ops already written
	trap string          // the trap directory ("" without -trap)
}

// armed takes the trap armed in the trap directory, if any: its point
// ("before" or "after"). The rename makes one invocation take it.
func (s *server) armed() string {
	if s.trap == "" {
		return ""
	}
	taken := filepath.Join(s.trap, fmt.Sprintf("taken.%d", os.Getpid()))
	if err := os.Rename(filepath.Join(s.trap, "arm"), taken); err != nil {
		return ""
	}
	b, err := os.ReadFile(taken) //nolint:gosec // G304: the suite's directory
	_ = os.Remove(taken)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// rearm puts back a trap this invocation took but did not reach.
func (s *server) rearm(point string) {
	tmp := filepath.Join(s.trap, fmt.Sprintf("arm.%d", os.Getpid()))
	if os.WriteFile(tmp, []byte(point), 0o600) == nil {
		_ = os.Rename(tmp, filepath.Join(s.trap, "arm"))
	}
}

// spring tells the suite the trap fired at op and waits (at most 30 s)
// until it says to go on.
func (s *server) spring(op string) {
	release := filepath.Join(s.trap, "release")
	tmp := filepath.Join(s.trap, "fired.tmp")
	if os.WriteFile(tmp, []byte(op), 0o600) != nil || os.Rename(tmp, filepath.Join(s.trap, "fired")) != nil {
		return
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
		if os.Remove(release) == nil {
			return
		}
		<-tick.C
	}
}

const schema = `{"type":"object","properties":{"op":{"type":"string","minLength":1},"work_ms":{"type":"integer","minimum":0,"maximum":5000},"review":{"type":"boolean"}},"required":["op"],"additionalProperties":false}`

func (s *server) Describe(context.Context, *xctv1.DescribeRequest) (*xctv1.DescribeResponse, error) {
	desc := func(name string, idem bool, what string) *xctv1.ToolDescriptor {
		return &xctv1.ToolDescriptor{Name: name, Description: what, InputSchema: schema,
			Effect: xctv1.Effect_EFFECT_REVERSIBLE, Idempotent: idem, Timeout: durationpb.New(10 * time.Second)}
	}
	return &xctv1.DescribeResponse{Tools: []*xctv1.ToolDescriptor{
		desc("charge", false, "appends a charge to the ledger (every call is an effect)"),
		desc("put", true, "writes the record named by op to the ledger once"),
	}}, nil
}

func (s *server) Invoke(ctx context.Context, req *xctv1.InvokeRequest) (*xctv1.InvokeResponse, error) {
	args := req.GetArguments().GetFields()
	op := args["op"].GetStringValue()
	key := req.GetIdempotencyKey()
	if op == "" || key == "" {
		return failure("INVALID_ARGUMENT", "op and an idempotency key are required"), nil
	}
	if req.GetTool() != "charge" && req.GetTool() != "put" {
		return failure("NOT_FOUND", fmt.Sprintf("no tool %q", req.GetTool())), nil
	}
	trap := s.armed()
	if trap == "before" {
		s.spring(op)
		if ctx.Err() != nil {
			return nil, ctx.Err() // the caller is gone: never started
		}
	}
	s.mu.Lock()
	if req.GetTool() == "put" && s.seen[op] {
		s.mu.Unlock()
		if trap == "after" {
			s.rearm(trap) // no effect here: the next invocation's
		}
		return success(op, false), nil
	}
	line, _ := json.Marshal(Entry{Key: key, Op: op, Tool: req.GetTool(), PID: os.Getpid(), At: time.Now().UnixMilli()})
	_, err := s.f.Write(append(line, '\n'))
	if err == nil {
		err = s.f.Sync()
	}
	if err == nil && req.GetTool() == "put" {
		s.seen[op] = true
	}
	s.mu.Unlock()
	if err != nil {
		// The effect may be half-written: say so, never "nothing happened".
		return nil, fmt.Errorf("ledger write: %w", err)
	}
	if trap == "after" {
		s.spring(op)
	}
	wait := time.Duration(args["work_ms"].GetNumberValue()) * time.Millisecond
	select {
	case <-time.After(wait):
	case <-ctx.Done(): // the caller is gone; the effect stays
		return nil, ctx.Err()
	}
	return success(op, true), nil
}

func success(op string, acted bool) *xctv1.InvokeResponse {
	v, _ := structpb.NewValue(map[string]any{"op": op, "acted": acted})
	return &xctv1.InvokeResponse{Response: &xctv1.Response{Outcome: &xctv1.Response_Success{Success: &xctv1.Success{Result: v}}}}
}

func failure(code, msg string) *xctv1.InvokeResponse {
	return &xctv1.InvokeResponse{Response: &xctv1.Response{Outcome: &xctv1.Response_Error{Error: &xctv1.Error{
		Code: code, Message: msg, Category: "input_error", Type: "invalid_format", SuggestedAction: "fix_arguments", Recoverable: true}}}}
}

// readSeen loads the ops of put effects already in the ledger. A torn last
// line (a kill in the middle of a write) is skipped: it names no key whole.
func readSeen(path string) (map[string]bool, error) {
	seen := map[string]bool{}
	f, err := os.Open(path) //nolint:gosec // G304: the test names its ledger
	if errors.Is(err, os.ErrNotExist) {
		return seen, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e Entry
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Tool == "put" {
			seen[e.Op] = true
		}
	}
	return seen, sc.Err()
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "gRPC listen address")
	ledger := flag.String("ledger", "", "ledger file effects are appended to (required)")
	trap := flag.String("trap", "", "directory of the suite's traps (optional)")
	flag.Parse()
	if *ledger == "" {
		fmt.Fprintln(os.Stderr, "ledgertool: -ledger is required")
		os.Exit(2)
	}
	seen, err := readSeen(*ledger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledgertool:", err)
		os.Exit(1)
	}
	f, err := os.OpenFile(*ledger, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600) //nolint:gosec // G304: the test names its ledger
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledgertool:", err)
		os.Exit(1)
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(context.Background(), "tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledgertool:", err)
		os.Exit(1)
	}
	g := grpc.NewServer()
	xctv1.RegisterToolServiceServer(g, &server{f: f, seen: seen, trap: *trap})
	fmt.Printf("ledgertool listening on %s\n", lis.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		g.GracefulStop()
	}()
	if err := g.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, "ledgertool:", err)
		os.Exit(1)
	}
	_ = f.Close()
}
