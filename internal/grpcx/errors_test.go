package grpcx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/testutil"
)

var errSentinel = errors.New("widget not found")

// failCodes is the table of the test service, as a service's errors.go
// declares it.
var failCodes = Codes{{Err: errSentinel, Code: codes.NotFound}}

// failErrors are the errors the test service's handlers return, by the
// name the caller sends.
var failErrors = map[string]error{
	"sentinel": fmt.Errorf("load widget w-1: %w", errSentinel),
	"unknown":  errors.New("open /var/lib/secret/db: permission denied"),
	"canceled": fmt.Errorf("read: %w", context.Canceled),
	"deadline": fmt.Errorf("read: %w", context.DeadlineExceeded),
	"status":   status.Error(codes.ResourceExhausted, "too many widgets"),
	"wrapped":  fmt.Errorf("call: %w", status.Error(codes.Aborted, "conflict")),
}

func failUnary(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := &wrapperspb.StringValue{}
	if err := dec(in); err != nil {
		return nil, err
	}
	h := func(_ context.Context, req any) (any, error) {
		return nil, failCodes.Status(failErrors[req.(*wrapperspb.StringValue).GetValue()])
	}
	return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Fail/Fail"}, h)
}

func failStream(_ any, ss grpc.ServerStream) error {
	in := &wrapperspb.StringValue{}
	if err := ss.RecvMsg(in); err != nil {
		return err
	}
	return failCodes.Status(failErrors[in.GetValue()])
}

var failDesc = grpc.ServiceDesc{
	ServiceName: "test.Fail",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Fail", Handler: failUnary}},
	Streams:     []grpc.StreamDesc{{StreamName: "Watch", Handler: failStream, ClientStreams: true}},
}

func TestBoundaryErrorMapping(t *testing.T) {
	t.Parallel()
	a, creds := tokensFile(t)
	logs := &testutil.Buffer{}
	table := testTable()
	table["/test.Fail/Fail"] = auth.Rule{AnyRole: true}
	table["/test.Fail/Watch"] = auth.Rule{AnyRole: true}
	srv := NewServer("test", slog.New(slog.NewTextHandler(logs, nil)), WithTable(table), WithSecurity(Security{Plaintext: true}), WithAuth(a))
	srv.GRPC.RegisterService(&failDesc, struct{}{})
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Stop(ctx)
		if err := <-errc; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	tok, _ := auth.TokenOf(creds, "alice")
	conn, err := Dial(srv.Addr(), WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()

	unary := func(ctx context.Context, name string) error {
		return conn.Invoke(ctx, "/test.Fail/Fail", wrapperspb.String(name), &emptypb.Empty{})
	}
	stream := func(ctx context.Context, name string) error {
		s, err := conn.NewStream(ctx, &failDesc.Streams[0], "/test.Fail/Watch")
		if err != nil {
			return err
		}
		if err := s.SendMsg(wrapperspb.String(name)); err != nil {
			return err
		}
		return s.RecvMsg(&emptypb.Empty{})
	}
	hidden := regexp.MustCompile(`^internal error \(id ([0-9a-f]{16})\)$`)
	for _, call := range []struct {
		kind string
		do   func(context.Context, string) error
	}{{"unary", unary}, {"stream", stream}} {
		for _, tc := range []struct {
			name string
			code codes.Code
			msg  string // the message the caller reads; "" for the hidden one
		}{
			{"sentinel", codes.NotFound, "load widget w-1: widget not found"},
			{"canceled", codes.Canceled, "read: context canceled"},
			{"deadline", codes.DeadlineExceeded, "read: context deadline exceeded"},
			{"status", codes.ResourceExhausted, "too many widgets"},
			{"wrapped", codes.Aborted, "call: rpc error: code = Aborted desc = conflict"},
			{"unknown", codes.Internal, ""},
		} {
			t.Run(call.kind+"/"+tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				st := status.Convert(call.do(ctx, tc.name))
				if st.Code() != tc.code {
					t.Fatalf("code %v, want %v (%q)", st.Code(), tc.code, st.Message())
				}
				if tc.msg != "" {
					if st.Message() != tc.msg {
						t.Fatalf("message %q, want %q", st.Message(), tc.msg)
					}
					return
				}
				m := hidden.FindStringSubmatch(st.Message())
				if m == nil || strings.Contains(st.Message(), "secret") {
					t.Fatalf("an unknown error reached the caller: %q", st.Message())
				}
				// The log has the error, the method and the id the caller got.
				line := ""
				for _, l := range strings.Split(logs.String(), "\n") {
					if strings.Contains(l, "error_id="+m[1]) {
						line = l
					}
				}
				wantMethod := "method=/test.Fail/Fail"
				if call.kind == "stream" {
					wantMethod = "method=/test.Fail/Watch"
				}
				if !strings.Contains(line, "permission denied") || !strings.Contains(line, wantMethod) {
					t.Fatalf("log line for id %s: %q\nlogs:\n%s", m[1], line, logs.String())
				}
			})
		}
	}
}

func TestCodesStatus(t *testing.T) {
	t.Parallel()
	if failCodes.Status(nil) != nil {
		t.Fatal("nil is not an error")
	}
	unknown := errors.New("boom")
	if got := failCodes.Status(unknown); !errors.Is(got, unknown) || status.Code(got) != codes.Unknown {
		t.Fatalf("an unknown error is left to the interceptor, got %v", got)
	}
	if c := failCodes.Code(fmt.Errorf("x: %w", errSentinel)); c != codes.NotFound {
		t.Fatalf("code %v", c)
	}
	if c := failCodes.Code(unknown); c != codes.Unknown {
		t.Fatalf("code %v", c)
	}
}
