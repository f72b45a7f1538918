// Package jsguard finds streams that write into another's subjects past
// NATS permissions. Permissions see who publishes to a subject, but a
// stream's republish is the server's own publish, and a stream's settings
// are its first creator's (they are in the request's body, which
// permissions do not see): a service that made one of its streams first
// could have it republish what it writes into the subjects of a bucket
// it may not write (the tool catalog, the approvals).
package jsguard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrUnlisted means the streams could not be listed.
var ErrUnlisted = errors.New("the streams could not be listed")

// ErrRepublished means a stream republishes into the subjects asked about.
var ErrRepublished = errors.New("a stream republishes into these subjects")

// RepublishedInto returns ErrRepublished naming the first stream that
// republishes into subjects (a pattern), ErrUnlisted if the streams could
// not be listed, nil if none does.
func RepublishedInto(ctx context.Context, js jetstream.JetStream, subjects string) error {
	streams := js.ListStreams(ctx)
	for info := range streams.Info() {
		if rp := info.Config.RePublish; rp != nil && SubjectsCollide(rp.Destination, subjects) {
			return fmt.Errorf("%w: stream %s republishes %s to %s", ErrRepublished, info.Config.Name, rp.Source, rp.Destination)
		}
	}
	if err := streams.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnlisted, err)
	}
	return nil
}

// RepublishedIntoPatiently is RepublishedInto asked again for a while
// (about six seconds, backing off) while the streams cannot be listed,
// NATS reconnecting, so that a moment's outage is not taken for an
// answer. It returns as RepublishedInto does, or ctx's end.
func RepublishedIntoPatiently(ctx context.Context, js jetstream.JetStream, subjects string) error {
	wait := 100 * time.Millisecond
	for {
		err := RepublishedInto(ctx, js, subjects)
		if !errors.Is(err, ErrUnlisted) || wait > 5*time.Second {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
			wait *= 2
		}
	}
}

// SubjectsCollide reports whether some subject matches both NATS subject
// patterns a and b (with * and >). A token that is a subject mapping
// function ({{wildcard(1)}}, {{split(1,-)}}, the older $1), which a
// republish destination may hold, stands for whatever a message's own
// subject makes of it, possibly several tokens: it collides as > does.
func SubjectsCollide(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(at) && i < len(bt); i++ {
		x, y := at[i], bt[i]
		switch {
		case x == ">" || y == ">" || mapped(x) || mapped(y):
			return true
		case x == "*" || y == "*" || x == y:
		default:
			return false
		}
	}
	return len(at) == len(bt)
}

// mapped reports whether a destination token is a mapping function:
// {{…}} or a $N placeholder.
func mapped(token string) bool {
	if strings.Contains(token, "{{") {
		return true
	}
	if len(token) < 2 || token[0] != '$' {
		return false
	}
	for _, c := range token[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ProvisionCommand makes XCT's streams and buckets (internal/provision).
const ProvisionCommand = "xct nats provision"

// ErrMissing means a stream or bucket a service binds does not exist: the
// deployment has not been provisioned.
var ErrMissing = errors.New("not provisioned")

// Missing is the error a service returns when name (a stream, a bucket, an
// object store) does not exist, saying what to run. Services only bind:
// XCT's streams are made by an administrator (internal/provision), since
// a stream's settings are its first creator's.
func Missing(kind, name string) error {
	return fmt.Errorf("%w: NATS has no %s %s; XCT's streams are made by an administrator before the services start: run `%s` with the admin's NATS credentials (xct dev and the Kubernetes Job xct-nats-provision do it)",
		ErrMissing, kind, name, ProvisionCommand)
}

// Unlike returns what in c XCT never makes on one of its streams: a
// republish, sources, a mirror, a subject transform, subjects other than
// subjects; with appendOnly (the chains) also deletes, purges or rollups
// allowed. Size limits, replicas, retention and the duplicate window are
// the operator's and not looked at. Empty: nothing.
func Unlike(c jetstream.StreamConfig, subjects []string, appendOnly bool) []string {
	var bad []string
	if c.RePublish != nil {
		bad = append(bad, fmt.Sprintf("republish %s to %s", c.RePublish.Source, c.RePublish.Destination))
	}
	if len(c.Sources) > 0 {
		names := make([]string, 0, len(c.Sources))
		for _, src := range c.Sources {
			names = append(names, src.Name)
		}
		bad = append(bad, "sources "+strings.Join(names, ", "))
	}
	if c.Mirror != nil {
		bad = append(bad, "a mirror of "+c.Mirror.Name)
	}
	if c.SubjectTransform != nil {
		bad = append(bad, "a subject transform")
	}
	if appendOnly && (!c.DenyDelete || !c.DenyPurge || c.AllowRollup) {
		bad = append(bad, fmt.Sprintf("deny delete %v, deny purge %v, rollups %v", c.DenyDelete, c.DenyPurge, c.AllowRollup))
	}
	have, want := slices.Clone(c.Subjects), slices.Clone(subjects)
	slices.Sort(have)
	slices.Sort(want)
	if !slices.Equal(have, want) {
		bad = append(bad, fmt.Sprintf("subjects %v", c.Subjects))
	}
	return bad
}
