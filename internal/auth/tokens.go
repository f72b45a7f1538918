package auth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MinTokenLen is the shortest plaintext token a tokens file may hold.
const MinTokenLen = 16

// TokenEntry is one principal of a tokens file. Exactly one of Token (the
// secret itself) and TokenSHA256 (hex SHA-256 of it, so the file holds no
// secret) is set.
type TokenEntry struct {
	Principal   string   `yaml:"principal"`
	Roles       []string `yaml:"roles"`
	Token       string   `yaml:"token,omitempty"`
	TokenSHA256 string   `yaml:"token_sha256,omitempty"`
}

// ParseTokens decodes a tokens file: a YAML list of entries. Unknown keys,
// unknown roles, a principal without a name or roles, a short token and a
// token given twice are errors: a typo must not silently grant or drop
// access.
func ParseTokens(data []byte) ([]TokenEntry, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var entries []TokenEntry
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	seen := map[[sha256.Size]byte]string{}
	names := map[string]string{}
	for i, e := range entries {
		where := fmt.Sprintf("tokens file entry %d (%q)", i+1, e.Principal)
		if strings.TrimSpace(e.Principal) == "" {
			return nil, fmt.Errorf("tokens file entry %d: principal is required", i+1)
		}
		// Two names one could take for the other (case, full-width
		// letters, a trailing dot: LookAlike) are one principal listed
		// twice: each would pass for the other before a reader.
		if other, dup := names[NameKey(e.Principal)]; dup {
			return nil, fmt.Errorf("%s: principal listed twice (as %q: names that differ only in case, width, invisible characters or a trailing dot are one)", where, other)
		}
		names[NameKey(e.Principal)] = e.Principal
		if len(e.Roles) == 0 {
			return nil, fmt.Errorf("%s: roles are required", where)
		}
		for _, r := range e.Roles {
			if !IsKnownRole(r) {
				return nil, fmt.Errorf("%s: unknown role %q (known: %s)", where, r, strings.Join(KnownRoles, ", "))
			}
		}
		d, err := e.digest()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if other, dup := seen[d]; dup {
			return nil, fmt.Errorf("%s: same token as %q", where, other)
		}
		seen[d] = e.Principal
	}
	return entries, nil
}

func (e TokenEntry) digest() ([sha256.Size]byte, error) {
	var d [sha256.Size]byte
	switch {
	case e.Token != "" && e.TokenSHA256 != "":
		return d, errors.New("set token or token_sha256, not both")
	case e.Token != "":
		if len(e.Token) < MinTokenLen {
			return d, fmt.Errorf("token is shorter than %d characters", MinTokenLen)
		}
		return sha256.Sum256([]byte(e.Token)), nil
	case e.TokenSHA256 != "":
		b, err := hex.DecodeString(e.TokenSHA256)
		if err != nil || len(b) != sha256.Size {
			return d, errors.New("token_sha256 must be 64 hex digits")
		}
		copy(d[:], b)
		return d, nil
	}
	return d, errors.New("token or token_sha256 is required")
}

// tokenSet is a parsed tokens file, ready for lookups.
type tokenSet struct {
	digests    [][sha256.Size]byte
	principals []Principal
}

func newTokenSet(entries []TokenEntry) (*tokenSet, error) {
	ts := &tokenSet{}
	for _, e := range entries {
		d, err := e.digest()
		if err != nil {
			return nil, err
		}
		roles := knownOnly(e.Roles)
		ts.digests = append(ts.digests, d)
		ts.principals = append(ts.principals, Principal{
			Name: strings.TrimSpace(e.Principal), Roles: roles, Service: slices.Contains(roles, RoleService),
		})
	}
	return ts, nil
}

// lookup finds the principal of a token. It compares the token's digest
// with every entry's in constant time and never stops early, so neither
// the time taken nor the entry matched leaks through timing.
func (ts *tokenSet) lookup(token string) (Principal, bool) {
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range ts.digests {
		if subtle.ConstantTimeCompare(d[:], ts.digests[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, false
	}
	return ts.principals[found], true
}

// NewToken returns a random token: 32 bytes from crypto/rand, base64url.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// TokenSHA256 is the token_sha256 form of a token.
func TokenSHA256(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:])
}
