package executor

import (
	"fmt"
	"strings"
	"testing"

	"github.com/xct-dev/xct/internal/redact"
)

// BenchmarkShownSum is what digest.go adds to an fs tool's call: the
// content scanned for a secret before its digest is reported (once for
// fs.read, fs.delete and fs.move, twice for an fs.write replacing a
// file), for prose, a configuration whose words the redactor's hints
// stop at ("token", "key"), and the configuration with a secret.
func BenchmarkShownSum(b *testing.B) {
	red, err := redact.New(redact.Rules{}, []byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		b.Fatal(err)
	}
	ws := &workspace{}
	ws.setRedactor(red)
	const prose = "the quick brown fox jumps over the lazy dog 0123\n"
	const config = "max_tokens: 4096 # the token budget for this step\n"
	for _, size := range []int{4 << 10, 64 << 10} {
		for _, c := range []struct {
			name, head, line string
		}{{"prose", "", prose}, {"config", "", config}, {"config-secret", "db_password: hunter2-q7\n", config}} {
			data := []byte(c.head + strings.Repeat(c.line, size/len(c.line)))
			b.Run(fmt.Sprintf("%s-%dKiB", c.name, size>>10), func(b *testing.B) {
				sum := checksum(data)
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				for b.Loop() {
					_ = ws.shownSum(data, sum)
				}
			})
		}
	}
}
