package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/xct-dev/xct/internal/auth"
)

// cmdDebug prints a one-time link that opens the debugger on a run: the
// link carries a code, not a token; the tracer exchanges it for a
// short-lived session cookie on first use, and refuses it afterwards or
// after a minute.
func cmdDebug(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("debug", stderr)
	var id identity
	base := id.addrFlag(fs, "debugger-url", svcDebugger, "the debugger's URL (the tracer's HTTP address)")
	id.register(fs, "as")
	if err := id.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &exitError{code: 2, err: errors.New("usage: xct debug RUN (prints a one-time link that opens the debugger on RUN)")}
	}
	u, err := url.Parse(*base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &exitError{code: 2, err: fmt.Errorf("--debugger-url %q: want http(s)://HOST:PORT/", *base)}
	}
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) && !id.plaintextAny {
		return &exitError{code: 2, err: fmt.Errorf("--debugger-url %s: the token would travel unencrypted to a non-loopback host (use https, or --plaintext-any)", *base)}
	}
	tok, err := auth.ClientToken(id.token, id.as, id.credentialsPath())
	if err != nil {
		if errors.Is(err, auth.ErrNoCredentials) {
			return fmt.Errorf("no token for the link: %s does not exist (pass --data-dir / XCT_DATA_DIR, --credentials, or --token)", id.credentialsPath())
		}
		return err
	}
	body, _ := json.Marshal(map[string]string{"chain": fs.Arg(0)})
	endpoint := strings.TrimSuffix(u.String(), "/") + "/api/login-links"
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-XCT-CSRF", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("debugger %s: %w", *base, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string }
		}
		msg := strings.TrimSpace(string(raw))
		if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		if resp.StatusCode == http.StatusNotFound {
			msg += " (this debugger makes no links: authentication is off there, open it directly)"
		}
		return fmt.Errorf("debugger %s: %s: %s", *base, resp.Status, msg)
	}
	var link struct {
		Path      string `json:"path"`
		ExpiresAt string `json:"expires_at"`
	}
	if err := json.Unmarshal(raw, &link); err != nil || !strings.HasPrefix(link.Path, "/") {
		return fmt.Errorf("debugger %s: unexpected answer %q", *base, raw)
	}
	fmt.Fprintln(stdout, strings.TrimSuffix(u.String(), "/")+link.Path)
	fmt.Fprintf(stderr, "the link opens run %s once, until %s: its page names whom it signs in as, and Continue signs the browser in for 30 minutes; never open a link someone else made\n", fs.Arg(0), link.ExpiresAt)
	return nil
}

func loopbackHost(h string) bool {
	return h == "localhost" || strings.HasPrefix(h, "127.") || h == "::1"
}
