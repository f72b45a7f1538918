package grpcx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// TestCallLogLevels: an OK call is logged at DEBUG only; a refusal that
// is the caller's business too; UNAVAILABLE at WARN and INTERNAL at ERROR,
// with method, peer, code, error and duration.
func TestCallLogLevels(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: "/xct.v1.ExecutorService/Execute"}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242}})
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name    string
		level   slog.Level
		err     error
		want    string // level of the line, "" for none
		code    string
		errText string
	}{
		{"ok at info", slog.LevelInfo, nil, "", "", ""},
		{"not found at info", slog.LevelInfo, status.Error(codes.NotFound, "no such step"), "", "", ""},
		{"ok at debug", slog.LevelDebug, nil, "DEBUG", "OK", ""},
		{"unavailable", slog.LevelInfo, status.Error(codes.Unavailable, "store down"), "WARN", "Unavailable", "store down"},
		{"internal", slog.LevelInfo, status.Error(codes.Internal, "boom"), "ERROR", "Internal", "boom"},
		{"plain error", slog.LevelInfo, errors.New("oops"), "ERROR", "Unknown", "oops"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: tc.level}))
			resp, err := logUnary(log)(ctx, "req", info, func(context.Context, any) (any, error) { return "resp", tc.err })
			if resp != "resp" || !errors.Is(err, tc.err) {
				t.Fatalf("interceptor changed the call's answer: %v, %v", resp, err)
			}
			if tc.want == "" {
				if buf.Len() != 0 {
					t.Fatalf("logged %s", buf.String())
				}
				return
			}
			var line map[string]any
			if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
				t.Fatalf("%v: %s", err, buf.String())
			}
			for k, v := range map[string]any{
				"level": tc.want, "msg": "finished call", "grpc.service": "xct.v1.ExecutorService", "grpc.method": "Execute",
				"grpc.method_type": "unary", "grpc.code": tc.code, "peer.address": "127.0.0.1:4242", "grpc.component": "server",
			} {
				if line[k] != v {
					t.Errorf("%s = %v, want %v (%s)", k, line[k], v, buf.String())
				}
			}
			if tc.errText != "" && !strings.Contains(line["grpc.error"].(string), tc.errText) {
				t.Errorf("grpc.error = %v", line["grpc.error"])
			}
			if _, ok := line["grpc.time_ms"].(float64); !ok {
				t.Errorf("no grpc.time_ms: %s", buf.String())
			}
			if _, ok := line["grpc.request.deadline"].(string); !ok {
				t.Errorf("no grpc.request.deadline: %s", buf.String())
			}
		})
	}
}

// BenchmarkCallLog: what logging adds to an OK unary call with INFO
// logging (the production default): this package's interceptor, and the
// go-grpc-middleware one it replaced, configured as NewServer had it.
func BenchmarkCallLog(b *testing.B) {
	log := slog.New(slog.NewJSONHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	info := &grpc.UnaryServerInfo{FullMethod: "/xct.v1.ExecutorService/Execute"}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242}})
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	handler := func(context.Context, any) (any, error) { return nil, nil }
	middleware := logging.UnaryServerInterceptor(logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(lvl), msg, fields...)
	}), logging.WithLogOnEvents(logging.FinishCall), logging.WithLevels(func(c codes.Code) logging.Level { return logging.Level(codeLevel(c)) }))
	for name, ic := range map[string]grpc.UnaryServerInterceptor{"calllog": logUnary(log), "middleware": middleware} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = ic(ctx, nil, info, handler)
			}
		})
	}
}
