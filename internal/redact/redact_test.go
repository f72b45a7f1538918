package redact

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xct-dev/xct/internal/jsguard"
	"github.com/xct-dev/xct/internal/testutil"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func newTest(t testing.TB, rules Rules) *Redactor {
	t.Helper()
	r, err := New(rules, testKey)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// decode parses JSON into the shapes Value is given.
func decode(t testing.TB, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestValue(t *testing.T) {
	t.Parallel()
	r := newTest(t, Rules{})
	m := r.Marker
	numMarker := m("1234")
	objMarker := m(`{"pass":"x","user":"u"}`)
	pem := "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nAAAA\n-----END RSA PRIVATE KEY-----"
	cases := []struct {
		name, in string
		want     any
	}{
		{"top-level key", `{"password":"hunter2","user":"bob"}`,
			map[string]any{"password": m("hunter2"), "user": "bob"}},
		{"case and punctuation", `{"X-Api-Key":"k1","DB_PASSWORD":"p1","clientSecret":"s1","APIKey":"k2","Authorization":"Basic Ym9iOnNlY3JldA=="}`,
			map[string]any{"X-Api-Key": m("k1"), "DB_PASSWORD": m("p1"), "clientSecret": m("s1"), "APIKey": m("k2"), "Authorization": m("Basic Ym9iOnNlY3JldA==")}},
		{"nested in objects and arrays", `{"env":[{"name":"A","token":"t-1"},{"headers":{"cookie":"c=1"}}]}`,
			map[string]any{"env": []any{map[string]any{"name": "A", "token": m("t-1")}, map[string]any{"headers": map[string]any{"cookie": m("c=1")}}}}},
		{"non-string values", `{"pin_password":1234,"credentials":{"user":"u","pass":"x"},"token":null,"api_key":true,"secret":""}`,
			map[string]any{"pin_password": numMarker, "credentials": objMarker, "token": nil, "api_key": true, "secret": ""}},
		{"keys that only look alike", `{"max_tokens":100,"tokens":{"input":3},"token_count":5,"password_file":"/run/pw","key":"k","secret_name":"db","api_key_id":"id-1"}`,
			map[string]any{"max_tokens": 100.0, "tokens": map[string]any{"input": 3.0}, "token_count": 5.0, "password_file": "/run/pw", "key": "k", "secret_name": "db", "api_key_id": "id-1"}},
		{"pattern in text", `{"content":"aws AKIAIOSFODNN7EXAMPLE ok"}`,
			map[string]any{"content": "aws " + m("AKIAIOSFODNN7EXAMPLE") + " ok"}},
		{"pem block", `{"content":` + jsonString(pem+"\nafter") + `}`,
			map[string]any{"content": m(pem) + "\nafter"}},
		{"url password", `{"url":"https://bob:s3cr3t@db.internal:5432/x"}`,
			map[string]any{"url": "https://bob:" + m("s3cr3t") + "@db.internal:5432/x"}},
		{"config file text", `{"content":"user: app\npassword: Hunter2-x\nDB_API_KEY=abc123\nclient_secret = \"with space\"\n"}`,
			map[string]any{"content": "user: app\npassword: " + m("Hunter2-x") + "\nDB_API_KEY=" + m("abc123") + "\nclient_secret = \"" + m("with space") + "\"\n"}},
		{"header text", `["Authorization: Bearer abc.def-123456"]`,
			[]any{"Authorization: Bearer " + m("abc.def-123456")}},
		{"tokens in text", `["ghp_0123456789abcdefghij0123456789abcdef","sk-proj-abcdefghij0123456789xyz","xoxb-1234567890-abc","AIzaSyA-0123456789abcdefghijklmnopqrstu","eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz"]`,
			[]any{m("ghp_0123456789abcdefghij0123456789abcdef"), m("sk-proj-abcdefghij0123456789xyz"), m("xoxb-1234567890-abc"), m("AIzaSyA-0123456789abcdefghijklmnopqrstu"), m("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz")}},
		{"ordinary text", `{"msg":"the token budget is 5000; max_tokens=100, tokens: 42. A basic understanding; the bearer instruments. Password reset link sent. secret sauce","path":"config/app.yaml","n":3.5,"ok":true}`,
			map[string]any{"msg": "the token budget is 5000; max_tokens=100, tokens: 42. A basic understanding; the bearer instruments. Password reset link sent. secret sauce", "path": "config/app.yaml", "n": 3.5, "ok": true}},
		{"markers stay as they are", `{"password":` + jsonString(m("x")) + `,"note":` + jsonString("token: "+m("y")) + `}`,
			map[string]any{"password": m("x"), "note": "token: " + m("y")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := decode(t, tc.in)
			before, _ := json.Marshal(in)
			got := r.Value(in)
			if !reflect.DeepEqual(got, tc.want) {
				g, _ := json.MarshalIndent(got, "", " ")
				w, _ := json.MarshalIndent(tc.want, "", " ")
				t.Fatalf("got\n%s\nwant\n%s", g, w)
			}
			if after, _ := json.Marshal(in); string(after) != string(before) {
				t.Fatalf("the input was modified: %s", after)
			}
			// Redacting twice changes nothing more.
			if again := r.Value(got); !reflect.DeepEqual(again, got) {
				t.Fatalf("not idempotent: %v", again)
			}
		})
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestMarkers(t *testing.T) {
	t.Parallel()
	r := newTest(t, Rules{})
	a, b := r.Marker("hunter2"), r.Marker("hunter2")
	if a != b {
		t.Fatalf("equal secrets, different markers: %s %s", a, b)
	}
	if r.Marker("hunter3") == a {
		t.Fatal("different secrets, equal markers")
	}
	if !IsMarker(a) || !strings.HasPrefix(a, "[REDACTED hmac-sha256:") || len(a) != len("[REDACTED hmac-sha256:]")+16 {
		t.Fatalf("marker %q", a)
	}
	other, err := New(Rules{}, []byte("another key, 16+ bytes long"))
	if err != nil {
		t.Fatal(err)
	}
	if other.Marker("hunter2") == a {
		t.Fatal("another key gives the same marker: the hash is not keyed")
	}
	plain := newTest(t, Rules{Hash: HashSHA256})
	if got := plain.Marker("hunter2"); got != "[REDACTED sha256:f52fbd32b2b3b86f]" {
		t.Fatalf("sha256 marker %q", got)
	}
	for _, s := range []string{"[REDACTED sha256:F52FBD32B2B3B86F]", "[REDACTED md5:f52fbd32b2b3b86f]", "[REDACTED sha256:f52f]", "x[REDACTED sha256:f52fbd32b2b3b86f]"} {
		if IsMarker(s) {
			t.Errorf("IsMarker(%q)", s)
		}
	}
	// The same secret under a key and inside a text gives the same marker.
	v := r.Value(map[string]any{"password": "hunter2-long", "log": "connecting with password=hunter2-long"}).(map[string]any)
	if v["log"] != "connecting with password="+v["password"].(string) {
		t.Fatalf("markers differ: %v", v)
	}
}

func TestScopeReplacesKnownSecrets(t *testing.T) {
	t.Parallel()
	r := newTest(t, Rules{})
	s := r.Scope()
	args := s.Map(map[string]any{"url": "https://api.internal/x", "headers": map[string]any{"X-Api-Key": "plain-looking-value"}, "pin": map[string]any{"password": "12345"}})
	want := r.Marker("plain-looking-value")
	if args["headers"].(map[string]any)["X-Api-Key"] != want {
		t.Fatalf("args %v", args)
	}
	// The tool echoes the key in an error message and in its result.
	if got := s.Text(`401: key "plain-looking-value" rejected`); got != `401: key "`+want+`" rejected` {
		t.Fatalf("echo not replaced: %q", got)
	}
	res := s.Value(map[string]any{"body": "you sent plain-looking-value and 12345"}).(map[string]any)
	// Secrets shorter than MinKnownLength are not hunted in other strings.
	if res["body"] != "you sent "+want+" and 12345" {
		t.Fatalf("result %v", res)
	}
	// Another scope knows nothing of it.
	if got := r.Scope().Text("plain-looking-value"); got != "plain-looking-value" {
		t.Fatalf("scopes share secrets: %q", got)
	}
	// A known secret that happens to occur in a marker's hex leaves the
	// marker alone.
	other := r.Marker("other")
	hex6 := other[len("[REDACTED hmac-sha256:"):][:6]
	s2 := r.Scope()
	s2.Map(map[string]any{"token": hex6})
	if got := s2.Text("was " + other + " and " + hex6); got != "was "+other+" and "+r.Marker(hex6) {
		t.Fatalf("marker rewritten: %q", got)
	}
	var nilScope *Scope
	if nilScope.Text("password: x") != "password: x" || nilScope.Map(nil) != nil {
		t.Fatal("a nil scope must pass values through")
	}
}

func TestConfiguredRules(t *testing.T) {
	t.Parallel()
	rules, err := ParseRules([]byte(`
keys: [ssn, session_id]
patterns:
  - name: internal
    regex: 'xct_[a-z0-9]{8}'
  - name: with-group
    regex: 'pin ([0-9]{4})'
min_known_length: 3
`))
	if err != nil {
		t.Fatal(err)
	}
	r := newTest(t, rules)
	got := r.Value(map[string]any{"SSN": "123-45-6789", "userSessionId": "s-9f8e", "note": "id xct_abcd1234, pin 9876", "password": "still"}).(map[string]any)
	want := map[string]any{"SSN": r.Marker("123-45-6789"), "userSessionId": r.Marker("s-9f8e"), "note": "id " + r.Marker("xct_abcd1234") + ", pin " + r.Marker("9876"), "password": r.Marker("still")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}

	only := newTest(t, Rules{NoBuiltins: true, Keys: []string{"ssn"}})
	got = only.Value(map[string]any{"ssn": "1", "password": "p", "t": "AKIAIOSFODNN7EXAMPLE"}).(map[string]any)
	if got["password"] != "p" || got["t"] != "AKIAIOSFODNN7EXAMPLE" || got["ssn"] != only.Marker("1") {
		t.Fatalf("no_builtins: %v", got)
	}
}

func TestBadConfig(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"unknown field":     "keyz: [a]",
		"bad regex":         "patterns: [{name: x, regex: '('}]",
		"empty regex":       "patterns: [{name: x}]",
		"matches empty":     "patterns: [{name: x, regex: 'a*'}]",
		"bad hash":          "hash: md5",
		"key without words": "keys: ['--']",
		"not yaml":          "keys: [",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseRules([]byte(doc)); !errors.Is(err, ErrBadConfig) {
				t.Fatalf("err %v, want ErrBadConfig", err)
			}
		})
	}
	if _, err := ParseRules(nil); err != nil {
		t.Fatalf("an empty file is the built-ins: %v", err)
	}
	if _, err := New(Rules{}, []byte("short")); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("short key: %v", err)
	}
	dir := t.TempDir()
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := (Config{KeyFile: short}).Validate(); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("short key file: %v", err)
	}
	if err := (Config{File: filepath.Join(dir, "missing.yaml")}).Validate(); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("missing rules file: %v", err)
	}
	a, err := (Config{}).Build(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := (Config{}).Build(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Marker("x") == b.Marker("x") {
		t.Fatal("without a cluster or key file, each redactor has its own random key")
	}
}

func TestKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "redact.key")
	if err := os.WriteFile(keyFile, append(testKey, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := Config{KeyFile: keyFile}.Build(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Marker("x") != newTest(t, Rules{}).Marker("x") {
		t.Fatal("the key file's key was not used")
	}
}

func TestClusterKeyIsSharedAndKept(t *testing.T) {
	t.Parallel()
	srv := testutil.RunJetStream(t)
	ctx := context.Background()
	var markers []string
	for range 2 { // two services of one cluster
		js, err := jetstream.New(testutil.Connect(t, srv))
		if err != nil {
			t.Fatal(err)
		}
		r, err := Config{}.Build(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		markers = append(markers, r.Marker("hunter2"))
	}
	if markers[0] != markers[1] {
		t.Fatalf("two services of one cluster disagree: %v", markers)
	}
	other := testutil.RunJetStream(t)
	js, err := jetstream.New(testutil.Connect(t, other))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Config{}.Build(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if r.Marker("hunter2") == markers[0] {
		t.Fatal("another cluster has the same key")
	}
}

func TestWords(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"X-Api-Key": "x api key", "xApiKey": "x api key", "APIKey": "api key", "DB_PASSWORD": "db password",
		"client.secret": "client secret", "token2fa": "token2fa", "oauth2Token": "oauth2 token", "--": "",
	} {
		if got := strings.Join(words(in), " "); got != want {
			t.Errorf("words(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzValue checks that redaction never panics, never modifies its input,
// and is idempotent.
func FuzzValue(f *testing.F) {
	for _, s := range []string{`{"password":"x"}`, `"Bearer abcdefgh12"`, `["https://a:b@c/"]`, `{"a":{"token":[1,2]}}`, `"password: \"x"`} {
		f.Add(s)
	}
	r := newTest(f, Rules{})
	f.Fuzz(func(t *testing.T, doc string) {
		var v any
		if json.Unmarshal([]byte(doc), &v) != nil {
			return
		}
		before, _ := json.Marshal(v)
		once := r.Value(v)
		if after, _ := json.Marshal(v); string(after) != string(before) {
			t.Fatalf("input modified")
		}
		if twice := r.Value(once); !reflect.DeepEqual(twice, once) {
			t.Fatalf("not idempotent: %v then %v", once, twice)
		}
	})
}

// TestClusterKeyRepublishedIntoIsRefused: the redaction key bucket is
// written by the services that redact only, but a stream's republish is
// the server's own publish: a key planted that way, known to whoever
// planted it, would let them test guesses of secrets against the markers
// on every chain. No service takes the key while a stream republishes into
// its bucket.
func TestClusterKeyRepublishedIntoIsRefused(t *testing.T) {
	ctx := context.Background()
	js, err := jetstream.New(testutil.Connect(t, testutil.RunJetStream(t)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ELSEWHERE", Subjects: []string{"elsewhere.>"},
		RePublish: &jetstream.RePublish{Source: "elsewhere.>", Destination: "$KV." + KeyBucket + ".>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ClusterKey(ctx, js); !errors.Is(err, jsguard.ErrRepublished) {
		t.Fatalf("ClusterKey beside a stream republishing into its bucket = %v, want %v", err, jsguard.ErrRepublished)
	}
}

// An event with nothing to redact is returned as it is, without a copy and
// without allocating: the step's events go through this on every append.
func TestNothingToRedactAllocatesNothing(t *testing.T) {
	r := newTest(t, Rules{})
	ev := map[string]any{"step": 3.0, "tool": "fs.read", "reasons": []any{map[string]any{"rule_id": "r", "message": "allowed"}},
		"arguments": map[string]any{"path": "a", "n": []any{1.0, "x"}}}
	sc := r.Scope()
	if got := sc.Map(ev); reflect.ValueOf(got).UnsafePointer() != reflect.ValueOf(ev).UnsafePointer() {
		t.Fatal("an event with nothing to redact was copied")
	}
	if n := testing.AllocsPerRun(50, func() { sc.Map(ev) }); n != 0 {
		t.Fatalf("redacting an event with nothing to redact made %v allocations", n)
	}
}
