package cli_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"runtime"
	"sync"
	"testing"
)

// BenchmarkFloor is the yardstick for BenchmarkCommand: the least any
// command must do with a chain file, on the same generated files, so the
// commands' figures can be read as ratios to it in one invocation.
//
//   - read: the file read in 4 MB blocks, split at newlines and handed to
//     every core, each line looked at once (its first byte);
//   - type: the same, and each line's "type" value found, the least a
//     command that counts events by type reads;
//   - hash: the same, and each line hashed with SHA-256, the least verify
//     does (it hashes each event's canonical form).
//
// No JSON is decoded and nothing is applied; a command costs what it does
// beyond this.
//
//	go test ./lctl/cli/ -run XXX -bench 'Floor|Command/(stats|verify)/1M' -benchtime 3x
func BenchmarkFloor(b *testing.B) {
	typeKey := []byte(`"type":"`)
	work := map[string]func(line []byte) int{
		"read": func(line []byte) int { return int(line[0] & 1) },
		"type": func(line []byte) int {
			i := bytes.Index(line, typeKey)
			if i < 0 {
				return 0
			}
			return bytes.IndexByte(line[i+len(typeKey):], '"') & 1
		},
		"hash": func(line []byte) int {
			s := sha256.Sum256(line)
			return int(s[0] & 1)
		},
	}
	dir := b.TempDir() // the chains of all the sub-benchmarks, removed at the end
	for _, mode := range []string{"read", "type", "hash"} {
		for _, s := range []struct {
			name string
			n    int
		}{{"100k", 100_000}, {"1M", 1_000_000}} {
			b.Run(mode+"/"+s.name, func(b *testing.B) {
				path := benchChain(b, dir, s.n)
				info, err := os.Stat(path)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(info.Size())
				b.ResetTimer()
				for b.Loop() {
					if lines := floorPass(b, path, work[mode]); lines < s.n {
						b.Fatalf("%d lines, want at least %d", lines, s.n)
					}
				}
				b.ReportMetric(float64(s.n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// floorPass reads path in blocks cut at newlines, runs fn on every
// non-empty line on every core, and returns the number of lines.
func floorPass(b *testing.B, path string, fn func([]byte) int) int {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = f.Close() }() // read only: nothing to lose
	blocks := make(chan []byte, 4)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		lines int
		sink  int
	)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			n, s := 0, 0
			for block := range blocks {
				for len(block) > 0 {
					line, rest, _ := bytes.Cut(block, []byte{'\n'})
					if len(line) > 0 {
						s += fn(line)
						n++
					}
					block = rest
				}
			}
			mu.Lock()
			lines, sink = lines+n, sink+s
			mu.Unlock()
		})
	}
	var carry []byte
	for {
		block := make([]byte, 4<<20)
		c := copy(block, carry)
		n, err := io.ReadFull(f, block[c:])
		block = block[:c+n]
		end := len(block)
		if err == nil {
			end = bytes.LastIndexByte(block, '\n') + 1
		}
		blocks <- block[:end]
		carry = block[end:]
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	close(blocks)
	wg.Wait()
	_ = sink
	return lines
}
