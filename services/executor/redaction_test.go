package executor

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
)

// TestStepRecordsAreRedacted checks that the tool and the live caller get
// the real values, while the step record (and so a replay) keeps markers.
func TestStepRecordsAreRedacted(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-secret"
	echo := testTool("test.echo", 0, 0, func(_ context.Context, args map[string]any) (any, *xctv1.Error) {
		if args["fail"] == true {
			return nil, wire.Errorf(wire.CodeToolFailure, "login with %v refused", args["password"])
		}
		return map[string]any{"seen": args["password"], "note": "used " + args["password"].(string)}, nil
	})
	s := newService(t, t.TempDir(), echo)
	must(t, s.Start(context.Background()))
	marker := s.redactor.Marker(secret)

	live := execStep(t, s, "ok", "test.echo", map[string]any{"password": secret})
	if got := resultAs[map[string]string](t, live.GetResponse()); got["seen"] != secret {
		t.Fatalf("the caller did not get the real result: %v", got)
	}
	failed := execStep(t, s, "bad", "test.echo", map[string]any{"password": secret, "fail": true})
	if !strings.Contains(failed.GetResponse().GetError().GetMessage(), secret) {
		t.Fatalf("the caller did not get the real error: %v", failed.GetResponse().GetError())
	}
	for _, id := range []string{"ok", "bad"} {
		rec, _, err := s.Step(context.Background(), id)
		must(t, err)
		raw, err := protojson.Marshal(rec)
		must(t, err)
		if strings.Contains(string(raw), secret) || !strings.Contains(string(raw), marker) {
			t.Fatalf("record %s: %s", id, raw)
		}
	}
	replay := execStep(t, s, "ok", "test.echo", map[string]any{"password": secret})
	if got := resultAs[map[string]string](t, replay.GetResponse()); !replay.GetReplayed() || got["seen"] != marker || got["note"] != "used "+marker {
		t.Fatalf("replay %v: %v", replay.GetReplayed(), got)
	}
}
