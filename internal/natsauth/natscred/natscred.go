// Package natscred is the part of internal/natsauth a NATS client needs:
// XCT's NATS users, a user's credentials and the connect option that
// presents them, and the credentials file. natsauth, which also builds
// the embedded server's users and permissions, re-exports all of it;
// this package exists so that a client (lctl tail, through
// internal/lctllive) does not link and initialise the NATS server's
// packages: some 4 ms at the start of every lctl command.
package natscred

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"go.yaml.in/yaml/v3"
)

// The users. A service connects as the user named like its target.
const (
	Orchestrator = "orchestrator"
	Validator    = "validator"
	Executor     = "executor"
	Tracer       = "tracer"
	// Reader reads the LCTL stream and nothing else (lctl tail).
	Reader = "reader"
	// Admin may do anything, stream updates and deletes included: for
	// operators, never for a service.
	Admin = "admin"
)

// Users lists every user in a fixed order.
var Users = []string{Orchestrator, Validator, Executor, Tracer, Reader, Admin}

// InboxRoot is where every reply comes: JetStream API answers, publish
// acknowledgements, consumer deliveries. Each user has its own branch of
// it (InboxPrefix) and may subscribe to that one only, so no service
// reads the replies to another's requests or learns where they go.
const InboxRoot = "_INBOX"

// InboxPrefix is where user's replies come: _INBOX.<user>. Option sets it
// on the connection; a user may subscribe under its own prefix only.
func InboxPrefix(user string) string { return InboxRoot + "." + user }

// Credentials is one user's name and password.
type Credentials struct {
	User     string
	Password string
}

// Option is the connect option that presents c and takes its replies
// under its own inbox prefix (none when c is empty).
func (c Credentials) Option() nats.Option {
	if c.User == "" {
		return func(*nats.Options) error { return nil }
	}
	return func(o *nats.Options) error {
		if err := nats.UserInfo(c.User, c.Password)(o); err != nil {
			return err
		}
		return nats.CustomInboxPrefix(InboxPrefix(c.User))(o)
	}
}

// ErrNoUser means a credentials file has no entry for the user asked.
var ErrNoUser = errors.New("no password for this NATS user")

// File is a credentials file: YAML, one "user: password" a line, any
// subset of Users. xct dev writes one with every user; a Kubernetes
// Secret holds one per service with its own line.
type File map[string]string

// Load reads a credentials file. It must not be readable by others.
func Load(path string) (File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("nats credentials: %w", err)
	}
	if st.Mode().IsRegular() && st.Mode().Perm()&0o077 != 0 && !kubernetesSecret(path) {
		return nil, fmt.Errorf("nats credentials %s: mode %v, want 0600 (it holds passwords)", path, st.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("nats credentials: %w", err)
	}
	var f File
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("nats credentials %s: %w", path, err)
	}
	for u, p := range f {
		if !slices.Contains(Users, u) {
			return nil, fmt.Errorf("nats credentials %s: unknown user %q (want one of %s)", path, u, strings.Join(Users, ", "))
		}
		if p == "" {
			return nil, fmt.Errorf("nats credentials %s: user %s has no password", path, u)
		}
	}
	if len(f) == 0 {
		return nil, fmt.Errorf("nats credentials %s: no user", path)
	}
	return f, nil
}

// kubernetesSecret reports a file projected from a Secret volume (a
// symbolic link into ..data), whose mode the kubelet sets.
func kubernetesSecret(path string) bool {
	target, err := os.Readlink(path)
	return err == nil && strings.HasPrefix(target, "..data/")
}

// For returns the credentials of user.
func (f File) For(user string) (Credentials, error) {
	p, ok := f[user]
	if !ok {
		return Credentials{}, fmt.Errorf("%w: %s", ErrNoUser, user)
	}
	return Credentials{User: user, Password: p}, nil
}
