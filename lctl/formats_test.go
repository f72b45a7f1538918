package lctl_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/xct-dev/xct/lctl"
)

// TestVersions checks which lctl versions are read: every 4.x (a warning
// for a minor version not known), nothing of another major version.
func TestVersions(t *testing.T) {
	tests := []struct {
		in, want, warn, err string
	}{
		{in: `"4.0"`, want: "4.0"},
		{in: `"4"`, want: "4.0"},
		{in: `4`, want: "4.0"},
		{in: `"4.1"`, want: "4.1"},
		{in: `4.1`, want: "4.1"},
		{in: `"4.7"`, want: "4.7", warn: `lctl version "4.7" is newer than the versions this lctl knows (4.0, 4.1)`},
		{in: `"4.0.3"`, want: "4.0.3", warn: `lctl version "4.0.3" is newer`},
		{in: `"5.0"`, err: `lctl version "5.0" has major version 5, which this lctl does not know (it reads 4.x)`},
		{in: `"10"`, err: `major version 10`},
		{in: `"3.0"`, err: `lctl version "3.0" is LCTL v3, which this lctl does not read as events; convert it first: lctl convert --from v3 --to v4`},
		{in: `"four"`, err: `lctl version "four" is not a version number`},
		{in: `"4.x"`, err: `is not a version number`},
		{in: `true`, err: `is not a version number`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			for _, format := range []lctl.Format{lctl.FormatJSON, lctl.FormatYAML} {
				doc := `{"lctl":` + tc.in + `,"chain":{"id":"c"},"events":[{"seq":1,"type":"step_start","agent":"a"}]}`
				f, err := lctl.DecodeFile(strings.NewReader(doc), format) // JSON is YAML too
				if tc.err != "" {
					var ve *lctl.VersionError
					if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.As(err, &ve) {
						t.Fatalf("%s: err = %v, want a VersionError containing %q", format, err, tc.err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", format, err)
				}
				if f.LCTL != tc.want {
					t.Fatalf("%s: version %q, want %q", format, f.LCTL, tc.want)
				}
				warned := strings.Join(f.Warnings, "\n")
				if tc.warn == "" && warned != "" {
					t.Fatalf("%s: unexpected warnings: %s", format, warned)
				}
				if tc.warn != "" && !strings.Contains(warned, tc.warn) {
					t.Fatalf("%s: warnings %q, want %q", format, warned, tc.warn)
				}
				// A 4.x file is written back with its own version.
				var buf bytes.Buffer
				if err := f.Encode(&buf, lctl.FormatJSON); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(buf.String(), `"lctl": "`+tc.want+`"`) {
					t.Fatalf("re-encoded without its version:\n%s", buf.String())
				}
			}
		})
	}
}

// TestV3FileSaysConvert checks that a v3 file without a version is told
// to be converted rather than "missing events".
func TestV3FileSaysConvert(t *testing.T) {
	_, err := lctl.DecodeFile(strings.NewReader(`{"chain":{"id":"c"},"trace":[]}`), lctl.FormatJSON)
	if err == nil || !strings.Contains(err.Error(), "lctl convert --from v3 --to v4") {
		t.Fatalf("err = %v", err)
	}
}

// TestInvalidUTF8 checks that a byte that is not UTF-8 is an error naming
// its offset, line and column, in JSON and YAML, and is never read as
// U+FFFD.
func TestInvalidUTF8(t *testing.T) {
	json := "{\"lctl\":\"4.0\",\"chain\":{\"id\":\"c\"},\"events\":[\n{\"seq\":1,\"type\":\"a\",\"agent\":\"b\xe9b\"}]}"
	yaml := "lctl: \"4.0\"\nchain: {id: c}\nevents:\n  - seq: 1\n    type: a\n    agent: caf\xc3\n"
	tests := []struct {
		name   string
		in     string
		format lctl.Format
		off    int64
		line   int
		col    int
	}{
		{"json latin-1", json, lctl.FormatJSON, int64(strings.Index(json, "\xe9")), 2, 31},
		{"yaml truncated sequence", yaml, lctl.FormatYAML, int64(strings.Index(yaml, "\xc3")), 6, 15},
		{"overlong encoding", "{\"lctl\":\"4.0\",\"chain\":{\"id\":\"\xc0\xaf\"},\"events\":[]}", lctl.FormatJSON, 29, 1, 30},
		{"surrogate half", "{\"lctl\":\"4.0\",\"chain\":{\"id\":\"\xed\xa0\x80\"},\"events\":[]}", lctl.FormatJSON, 29, 1, 30},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lctl.DecodeFile(strings.NewReader(tc.in), tc.format)
			var ee *lctl.EncodingError
			if !errors.As(err, &ee) {
				t.Fatalf("err = %v, want an EncodingError", err)
			}
			if ee.Offset != tc.off || ee.Line != tc.line || ee.Column != tc.col {
				t.Fatalf("error at offset %d line %d column %d, want %d %d %d (%v)", ee.Offset, ee.Line, ee.Column, tc.off, tc.line, tc.col, err)
			}
			if want := "invalid UTF-8 at byte offset"; !strings.Contains(err.Error(), want) {
				t.Fatalf("%v does not say %q", err, want)
			}
			// The streaming reader finds the same byte, however the
			// input is cut into reads.
			for _, r := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in)), iotest.HalfReader(strings.NewReader(tc.in))} {
				_, err := io.ReadAll(lctl.NewUTF8Reader(r))
				var se *lctl.EncodingError
				if !errors.As(err, &se) || se.Offset != tc.off || se.Line != tc.line || se.Column != tc.col {
					t.Fatalf("streaming: err = %v, want offset %d line %d column %d", err, tc.off, tc.line, tc.col)
				}
			}
		})
	}
	// Valid multi-byte text passes both, split anywhere.
	good := "{\"lctl\":\"4.0\",\"chain\":{\"id\":\"c\"},\"events\":[{\"seq\":1,\"type\":\"a\",\"agent\":\"café ✓ 𝄞\"}]}"
	f, err := lctl.DecodeFile(strings.NewReader(good), lctl.FormatJSON)
	if err != nil || f.Events[0].Agent != "café ✓ 𝄞" {
		t.Fatalf("valid UTF-8: %v %+v", err, f)
	}
	out, err := io.ReadAll(lctl.NewUTF8Reader(iotest.OneByteReader(strings.NewReader(good))))
	if err != nil || string(out) != good {
		t.Fatalf("streaming valid UTF-8: %v", err)
	}
	// A character cut off by the end of the input is an error too.
	_, err = io.ReadAll(lctl.NewUTF8Reader(iotest.OneByteReader(strings.NewReader("ab\xe2\x9c"))))
	var ee *lctl.EncodingError
	if !errors.As(err, &ee) || ee.Offset != 2 {
		t.Fatalf("cut character: %v", err)
	}
	// UTF-16 is named as such.
	_, err = lctl.DecodeFile(bytes.NewReader([]byte{0xFF, 0xFE, '{', 0}), lctl.FormatJSON)
	if err == nil || !strings.Contains(err.Error(), "UTF-16") {
		t.Fatalf("UTF-16: %v", err)
	}
}
