package lctllive_test

import (
	"context"
	"strings"
	"testing"

	"github.com/xct-dev/xct/internal/auth"
	"github.com/xct-dev/xct/internal/lctllive"
	"github.com/xct-dev/xct/lctl/cli"
)

// lctl names XCT's default credentials file in its help without importing
// XCT: the two must agree.
func TestHelpNamesXCTsCredentialsFile(t *testing.T) {
	t.Parallel()
	var out, errOut strings.Builder
	cli.Run(context.Background(), []string{"stats", "-h"}, cli.Env{Stdout: &out, Stderr: &errOut, Live: lctllive.Live{}})
	if !strings.Contains(out.String()+errOut.String(), "(default "+auth.DefaultCredentialsPath+",") {
		t.Fatalf("help does not name %s:\n%s%s", auth.DefaultCredentialsPath, out.String(), errOut.String())
	}
}
