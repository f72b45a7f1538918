package orchestrator

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/grpcx/grpcxtest"
)

// as is ctx carrying an authenticated principal, as the server's auth
// interceptor leaves it for a handler called in-process.
func as(ctx context.Context, name string, roles ...string) context.Context {
	return auth.NewContext(ctx, auth.Principal{Name: name, Roles: roles, Service: name == grpcxtest.Service})
}

func TestActingPrincipal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name, requested string
		ctx             context.Context
		want            string
		code            codes.Code
	}{
		{"no caller", "", ctx, "", codes.Unauthenticated},
		{"the caller", "", as(ctx, "alice", auth.RoleSubmitter), "alice", codes.OK},
		{"the caller by name", " Alice ", as(ctx, "alice", auth.RoleSubmitter), "alice", codes.OK},
		{"someone else", "bob", as(ctx, "alice", auth.RoleSubmitter), "", codes.PermissionDenied},
		{"an admin for someone else", "bob", as(ctx, "root", auth.RoleAdmin), "", codes.PermissionDenied},
		{"a service for someone", "bob", as(ctx, grpcxtest.Service, auth.RoleService), "bob", codes.OK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, roles, err := actingPrincipal(tc.ctx, tc.requested)
			if status.Code(err) != tc.code || got != tc.want {
				t.Fatalf("%q %v %v", got, roles, err)
			}
			if tc.want == "alice" && (len(roles) != 1 || roles[0] != auth.RoleSubmitter) {
				t.Fatalf("roles %v", roles)
			}
		})
	}
	if err := mayCancel(as(ctx, "alice", auth.RoleSubmitter), "alice"); err != nil {
		t.Fatal(err)
	}
	if err := mayCancel(as(ctx, "alice", auth.RoleSubmitter), "bob"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a submitter cancels another's run: %v", err)
	}
	// Another user whose name folds to alice's is not alice.
	for _, other := range []string{"Alice", "ALICE", "ａｌｉｃｅ", "alice."} {
		if err := mayCancel(as(ctx, other, auth.RoleSubmitter), "alice"); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%q cancels alice's run: %v", other, err)
		}
	}
	if err := mayCancel(as(ctx, "carol", auth.RoleOperator), "bob"); err != nil {
		t.Fatalf("an operator cancels: %v", err)
	}
}
