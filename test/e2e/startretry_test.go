package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
	"github.com/xct-dev/xct/internal/testutil"
)

// healthOf asks addr's gRPC health (open to anyone) for the server's
// overall status.
func healthOf(t *testing.T, addr string) func() (healthpb.HealthCheckResponse_ServingStatus, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	hc := healthpb.NewHealthClient(conn)
	return func() (healthpb.HealthCheckResponse_ServingStatus, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return resp.GetStatus(), err
	}
}

// waitStatus waits until health reports want.
func waitStatus(t *testing.T, name string, health func() (healthpb.HealthCheckResponse_ServingStatus, error), want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	testutil.Eventually(t, time.Minute, func() error {
		got, err := health()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if got != want {
			return fmt.Errorf("%s is %s, want %s", name, got, want)
		}
		return nil
	})
}

// Session 17 (ops17), issue 17: the executor, the validator and the
// orchestrator as separate processes against a nats-server process.
//
// A start that NATS fails after it answered the readiness probe (a
// request of the start unanswered past --start-timeout: a leader
// election, NATS gone again) ended the process on main: only the tracer
// was started again (session 16), so a supervisor restarted the others
// in a loop. Each is now served NOT_SERVING saying why, and its start
// is tried again, with backoff, until it succeeds. Then nats-server is
// killed and started again on its port and store: every process reports
// NOT_SERVING while it is gone and SERVING once it is back, none exits,
// and a run goes through. The validator stopped, a run's steps are
// denied naming the validator's address (the orchestrator stays
// SERVING: its reads, cancels and runs' ends still work); started again,
// a run goes through.
func TestServicesStartAgainAfterNATSFailedTheirStart(t *testing.T) {
	t.Parallel()
	xct, natsBin := binaries(t)
	base := t.TempDir()
	workspace, scripts := processDirs(t, base, "demo.yaml", demoScript(t))
	natsConf, store := testutil.NATSServerConfigFile(t), filepath.Join(base, "nats")
	startNATS := func(port string) (*proc, string) {
		ns := startProc(t, "nats-server", natsBin, "-c", natsConf, "-a", "127.0.0.1", "-p", port, "-js", "-sd", store)
		return ns, ns.waitFor(t, regexp.MustCompile(`Listening for client connections on (127\.0\.0\.1:\d+)`), 30*time.Second)
	}
	ns, natsAddr := startNATS("-1")
	provisionNATS(t, xct, "nats://"+natsAddr)
	// The services reach NATS through a proxy that can hold back one
	// request of a start (and what its connection sends after it).
	proxy := testutil.NewAckLoser(t, natsAddr)

	creds := grpcxtest.New(t)
	natsCreds := testutil.NATSCredentialsFile(t)
	_, valKey, execTrust := verdictKeys(t)
	serve := func(target string, extra ...string) *proc {
		args := append([]string{"serve", "--target", target, "--nats", proxy.URL(), "--" + target + "-listen", "127.0.0.1:0",
			"--plaintext", "--auth-tokens", creds.Path, "--service-token", creds.Token(t, grpcxtest.Service), "--nats-credentials", natsCreds,
			"--start-timeout", "2s", "--start-retry-max-wait", "500ms"}, extra...)
		return startProc(t, target, xct, args...)
	}
	// The start fails in Start (the probe passed) or, when the probe
	// itself timed out on a loaded machine, in the start made after it.
	startFailedRe := regexp.MustCompile(`(waiting for NATS: serving NOT_SERVING until a start succeeds|could not start: NATS did not answer it; starting it again).*(deadline exceeded|did not answer)`)
	type service struct {
		name   string
		p      *proc
		addr   string
		health func() (healthpb.HealthCheckResponse_ServingStatus, error)
	}
	var services []*service
	// startHeld starts target with the first request matching subject
	// held back past its start's bound, and checks that the process
	// stays, NOT_SERVING, then starts and reports SERVING once the
	// request is let through.
	startHeld := func(target, subject string, extra ...string) *service {
		held, let := proxy.HoldNext(func(s string, _ []byte) bool { return strings.HasPrefix(s, subject) })
		p := serve(target, extra...)
		select {
		case <-held:
		case <-p.done:
			t.Fatalf("%s exited before its start sent %s:\n%s", target, subject, p.output())
		case <-time.After(time.Minute):
			t.Fatalf("%s did not send %s in its start:\n%s", target, subject, p.output())
		}
		if _, err := p.WaitFor(startFailedRe, time.Minute); err != nil {
			let()
			t.Fatalf("%s, its start unanswered: %v", target, err)
		}
		addr := p.waitFor(t, listening, 30*time.Second)
		s := &service{name: target, p: p, addr: addr, health: healthOf(t, addr)}
		if st, err := s.health(); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
			let()
			t.Fatalf("%s while its start fails: %s, %v", target, st, err)
		}
		let()
		waitStatus(t, target, s.health, healthpb.HealthCheckResponse_SERVING)
		services = append(services, s)
		return s
	}
	exec := startHeld("executor", "$KV.XCT_TOOLS.", append([]string{"--workspace", workspace}, execTrust...)...)
	val := startHeld("validator", "$JS.API.CONSUMER.CREATE.KV_XCT_TOOLS", valKey...)
	orch := startHeld("orchestrator", "$JS.API.STREAM.LIST", "--validator-addr", val.addr, "--executor-addr", exec.addr, "--scripts-dir", scripts)

	// run runs the demo; ok: every step was judged by the validator.
	run := func(ok bool, want ...string) {
		t.Helper()
		runP := startProc(t, "xct run", xct, "run", "--addr", orch.addr, "--model", "scripted:demo.yaml", "--goal", "switch to green",
			"--credentials", creds.Path, "--as", "alice")
		_, out := runP.wait(t, 2*time.Minute)
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("xct run's output lacks %q:\n%s", w, out)
			}
		}
		if judged := !strings.Contains(out, "VALIDATOR_UNAVAILABLE"); judged != ok {
			t.Fatalf("every step judged by the validator: %v, want %v:\n%s", judged, ok, out)
		}
	}
	run(true, "[step 2] verdict   ALLOW", "done: Deployment switched from blue to green")

	// NATS goes away and comes back on its port, with its store.
	port := natsAddr[strings.LastIndex(natsAddr, ":")+1:]
	if err := ns.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-ns.done
	release := testutil.HoldPort(t, natsAddr) // nobody takes the port meanwhile
	for _, s := range services {
		waitStatus(t, s.name, s.health, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	release()
	startNATS(port)
	for _, s := range services {
		waitStatus(t, s.name, s.health, healthpb.HealthCheckResponse_SERVING)
	}
	run(true, "[step 2] verdict   ALLOW", "done: Deployment switched from blue to green")

	// The validator goes away: steps are denied saying so; the
	// orchestrator still serves.
	if err := val.p.stop(t); err != nil {
		t.Fatalf("validator: %v", err)
	}
	releaseVal := testutil.HoldPort(t, val.addr)
	run(false, "[step 2] error     VALIDATOR_UNAVAILABLE: the validator could not be reached")
	if st, err := orch.health(); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("orchestrator with the validator down: %s, %v", st, err)
	}
	for _, s := range services {
		select {
		case <-s.p.done:
			if s != val {
				t.Fatalf("%s exited:\n%s", s.name, s.p.output())
			}
		default:
		}
	}
	// Back on its address: the orchestrator's next run goes through.
	releaseVal()
	serve("validator", append(valKey, "--validator-listen", val.addr)...)
	waitStatus(t, "validator", val.health, healthpb.HealthCheckResponse_SERVING)
	run(true, "[step 2] verdict   ALLOW", "done: Deployment switched from blue to green")
}
