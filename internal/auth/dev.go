package auth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// DefaultCredentialsPath is where the CLI looks for credentials, relative
// to the working directory: the file `xct dev` writes in its data dir.
const DefaultCredentialsPath = ".xct/dev/credentials.yaml" //nolint:gosec // a path, not a credential

// DevServicePrincipal is the principal of the embedded cluster's services
// when they call each other.
const DevServicePrincipal = ServicePrincipalPrefix + "dev"

// DevUser is the principal the CLI uses when none is named.
const DevUser = "dev"

// devPrincipals are the principals of a development cluster.
var devPrincipals = []TokenEntry{
	{Principal: DevUser, Roles: []string{RoleSubmitter, RoleOperator, RoleAuditor}},
	{Principal: "alice", Roles: []string{RoleSubmitter}},
	{Principal: "bob", Roles: []string{RoleApprover}},
	{Principal: "carol", Roles: []string{RoleOperator}},
	{Principal: "dave", Roles: []string{RoleAuditor}},
	{Principal: "admin", Roles: []string{RoleAdmin}},
	{Principal: DevServicePrincipal, Roles: []string{RoleService}},
}

// DevCredentials makes sure path holds development credentials: the
// principals dev, alice, bob, carol, dave, admin and the services' own,
// each with a random token. An existing file is kept (tokens change only
// when it is removed) and must parse. The file is a tokens file, so the
// services read it with --auth-tokens; it is written with mode 0600.
func DevCredentials(path string) ([]TokenEntry, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		entries, err := ParseTokens(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (remove it to get new development credentials)", path, err)
		}
		return entries, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	entries := make([]TokenEntry, len(devPrincipals))
	for i, p := range devPrincipals {
		tok, err := NewToken()
		if err != nil {
			return nil, err
		}
		entries[i] = TokenEntry{Principal: p.Principal, Roles: p.Roles, Token: tok}
	}
	out, err := yaml.Marshal(entries)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	header := "# Development credentials of `xct dev`: one bearer token per principal.\n" +
		"# Remove this file to get new tokens. Never use these outside local development.\n"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	// O_EXCL: two clusters starting at once cannot overwrite each other.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return DevCredentials(path)
	}
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	if _, err := f.Write(append([]byte(header), out...)); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("credentials: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	return entries, nil
}

// TokenOf returns the plaintext token of a principal in entries (a client
// choosing among the tokens of its own file: `--as Bob` finds bob's, as a
// tokens file holds no two look-alike names).
func TokenOf(entries []TokenEntry, principal string) (string, bool) {
	for _, e := range entries {
		if LookAlike(e.Principal, principal) && e.Token != "" {
			return e.Token, true
		}
	}
	return "", false
}

// ErrNoCredentials means a client has no token to send.
var ErrNoCredentials = errors.New("no credentials: pass --token (or XCT_TOKEN), or run `xct dev` here so .xct/dev/credentials.yaml exists, or point --credentials at a credentials file")

// ClientToken picks the token a command-line client sends: token when set;
// else the token of principal as (or of "dev" when as is empty) from the
// credentials file at credPath (DefaultCredentialsPath when empty).
func ClientToken(token, as, credPath string) (string, error) {
	if token = strings.TrimSpace(token); token != "" {
		return token, nil
	}
	if credPath == "" {
		credPath = DefaultCredentialsPath
	}
	data, err := os.ReadFile(credPath)
	if errors.Is(err, fs.ErrNotExist) {
		return "", ErrNoCredentials
	}
	if err != nil {
		return "", fmt.Errorf("credentials: %w", err)
	}
	entries, err := ParseTokens(data)
	if err != nil {
		return "", fmt.Errorf("%s: %w", credPath, err)
	}
	if as == "" {
		as = DevUser
	}
	tok, ok := TokenOf(entries, as)
	if !ok {
		return "", fmt.Errorf("%s has no token for %q", credPath, as)
	}
	return tok, nil
}
