package redact

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

// Issue #11: a secret in binary (non-UTF-8) tool output survived in the
// base64 the result stored. The bytes are scanned before they are stored.
func TestSecretsInBase64Output(t *testing.T) {
	t.Parallel()
	r := newTest(t, Rules{})
	secret := "AKIAIOSFODNN7EXAMPLE"
	raw := append([]byte{0xff, 0xfe, 0x00, 0x80}, []byte("key "+secret+" \x00\xc3")...)
	enc := base64.StdEncoding.EncodeToString(raw)
	for name, in := range map[string]map[string]any{
		"fs.read":       {"path": "bin.dat", "content": enc, "encoding": "base64", "size": float64(len(raw))},
		"http.request":  {"status": 200.0, "body": enc, "encoding": "base64"},
		"shell.exec":    {"exit_code": 0.0, "stdout": enc, "stdout_encoding": "base64", "stderr": "", "stderr_encoding": "utf-8"},
		"shell stderr":  {"exit_code": 1.0, "stdout": "", "stdout_encoding": "utf-8", "stderr": enc, "stderr_encoding": "base64"},
		"nested result": {"files": []any{map[string]any{"content": enc, "encoding": "base64"}}},
	} {
		out := r.Scope().Map(in)
		text := render(t, out)
		if strings.Contains(text, enc) {
			t.Errorf("%s: the encoded secret was stored: %s", name, text)
			continue
		}
		// Decode whatever base64 member is left: the secret is in none.
		found := false
		walk(out, func(s string) {
			if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) > 0 {
				found = true
				if strings.Contains(string(b), secret) {
					t.Errorf("%s: the secret survives in the decoded bytes", name)
				}
				if !strings.Contains(string(b), MarkerPrefix) || b[0] != 0xff {
					t.Errorf("%s: the bytes around the secret were not kept: %q", name, b)
				}
			}
		})
		if !found {
			t.Errorf("%s: no base64 member left: %s", name, text)
		}
	}
	// The input is not changed; a result without secrets is returned as is.
	clean := map[string]any{"content": base64.StdEncoding.EncodeToString([]byte{0xff, 1, 2}), "encoding": "base64"}
	if out, changed := r.Scope().Redact(clean); changed || render(t, out) != render(t, clean) {
		t.Fatalf("clean bytes changed: %v", out)
	}
}

// Issue #11: a zero-width character inside a key name defeated key
// matching. Keys are read without format characters and in NFKC form.
func TestKeyNamesAreNormalised(t *testing.T) {
	t.Parallel()
	r := newTest(t, Rules{})
	for _, key := range []string{"pass\u200bword", "pass\u200dword", "\ufeffapi_key", "ｐａｓｓｗｏｒｄ", "api\u2060Key", "DB_PASS\u200eWORD"} {
		out := r.Scope().Map(map[string]any{key: "hunter2-value"})
		if out[key] != r.Marker("hunter2-value") {
			t.Errorf("%q: %v", key, out[key])
		}
	}
	if out := r.Scope().Map(map[string]any{"pass\u200bport": "x"}); out["pass\u200bport"] != "x" {
		t.Errorf("a key that is not a secret's was redacted: %v", out)
	}
}

func walk(v any, f func(string)) {
	switch x := v.(type) {
	case string:
		f(x)
	case map[string]any:
		for _, e := range x {
			walk(e, f)
		}
	case []any:
		for _, e := range x {
			walk(e, f)
		}
	}
}

func render(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
