// Package natsauth is who may do what on XCT's NATS: one user per service
// (orchestrator, validator, executor, tracer), a read-only user for lctl
// tail and an admin, each with its subject permissions, and the credentials
// file the services read their passwords from (docs/security.md, "NATS").
//
// Anonymous connections are refused by every server XCT starts
// (internal/natsembed); the Kubernetes NATS config (deploy/k8s) carries
// the same permissions, which its tests compare with these.
package natsauth

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"

	"github.com/xct-dev/xct/internal/natsauth/natscred"
)

// The users. A service connects as the user named like its target
// (natscred holds them, with the credentials file, for clients that need
// nothing else).
const (
	Orchestrator = natscred.Orchestrator
	Validator    = natscred.Validator
	Executor     = natscred.Executor
	Tracer       = natscred.Tracer
	// Reader reads the LCTL stream and nothing else (lctl tail).
	Reader = natscred.Reader
	// Admin may do anything, stream updates and deletes included: for
	// operators, never for a service.
	Admin = natscred.Admin
)

// Users lists every user in a fixed order.
var Users = natscred.Users

// Subjects the permissions name. They are XCT's stream and bucket names
// spelled out here (services/…, internal/eventlog) so that this package
// depends on none of them; the tests check each against the real thing.
const (
	chains = "lctl.chain.>"
	// otelChains are the chains the tracer makes from OpenTelemetry
	// traces, on a stream of their own (LCTL_OTEL), so that the tracer
	// may write them and no run's chain.
	otelChains = "lctl.otel.>"
	toolsKV    = "$KV.XCT_TOOLS.>"
	stepsKV    = "$KV.XCT_STEPS.>"
	blobsObj   = "$O.XCT_STEP_BLOBS.>"
	approvals  = "$KV.XCT_APPROVALS.>"
	owners     = "$KV.XCT_RUN_OWNERS.>"
	// quota is each principal's runs in progress (--max-runs across
	// the cluster), the orchestrator's.
	quota = "$KV.XCT_RUN_QUOTA.>"
	// rates are the calls counted under the policies' rate limits,
	// shared by the validators.
	rates = "$KV.XCT_RATE_LIMITS.>"
	// policyEpochs are the validators' signed policy epochs, which
	// executors read (verdict.PolicyBucket).
	policyEpochs = "$KV.XCT_POLICY.>"
	redaction    = "$KV.XCT_REDACTION.>"
	// flowControl is the replies a client sends to a push consumer's
	// flow control requests (KV watchers).
	flowControl = "$JS.FC.>"
)

// adminOnly are the JetStream API requests that make, change or destroy a
// stream or what it holds: no service needs one. Every stream and bucket
// is made by the admin at deployment (internal/provision, `xct nats
// provision`) and only bound by the services: a stream's settings are its
// first creator's, in the request's body, which permissions do not see, so
// a service allowed to create one could give it a republish into another's
// bucket or sources copying another's records.
var adminOnly = []string{
	"$JS.API.STREAM.CREATE.>",
	"$JS.API.STREAM.UPDATE.>",
	"$JS.API.STREAM.DELETE.>",
	"$JS.API.STREAM.MSG.DELETE.>",
	"$JS.API.STREAM.RESTORE.>",
	"$JS.API.STREAM.PEER.REMOVE.>",
	"$JS.API.STREAM.LEADER.STEPDOWN.>",
	"$JS.API.META.>",
	"$JS.API.SERVER.>",
	"$JS.API.ACCOUNT.PURGE.>",
}

// purgeable are XCT's streams (KV buckets and the object store are
// streams KV_ and OBJ_), each with the user that may purge it: the
// orchestrator purges old delete markers of its run owners bucket
// (KeyValue.PurgeDeletes); the executor's object store purges an
// object's old chunks when a blob is put again under the same name (a
// denied request would hang the put until its deadline). Nobody else
// purges anything. A deny list of names, since a deny wins over any
// allow: every purge but those two is named here.
var purgeable = map[string]string{
	"LCTL":               "",
	"LCTL_OTEL":          "",
	"KV_XCT_TOOLS":       "",
	"KV_XCT_STEPS":       "",
	"OBJ_XCT_STEP_BLOBS": Executor,
	"KV_XCT_APPROVALS":   "",
	"KV_XCT_REDACTION":   "",
	"KV_XCT_RUN_OWNERS":  Orchestrator,
	"KV_XCT_RUN_QUOTA":   "",
	"KV_XCT_RATE_LIMITS": "",
	"KV_XCT_POLICY":      "",
}

// allowed is what user may publish: serviceAPI, its purges, flow control
// replies and its data subjects w.
func allowed(user string, w []string) []string {
	out := slices.Clone(serviceAPI)
	names := make([]string, 0, len(purgeable))
	for stream := range purgeable {
		names = append(names, stream)
	}
	sort.Strings(names)
	for _, stream := range names {
		if purgeable[stream] == user {
			out = append(out, "$JS.API.STREAM.PURGE."+stream)
		}
	}
	out = append(out, consumerCreates(user)...)
	return append(append(out, flowControl), w...)
}

// consumes are the streams each service makes consumers on, each with
// the filters of its consumers: since nats-server 2.9 a consumer create
// request names its stream, its consumer and its one filter in the
// subject ($JS.API.CONSUMER.CREATE.<stream>.<consumer>.<filter>; the
// server refuses a body whose name or filter differs), so permissions
// can say which. NATS bounds consumers per stream, for everyone at once
// (MaxConsumersPerStream), never per user: a service that may make
// consumers on a stream may fill its bound for every other reader. So
// each may make them only where it reads with them:
//
//   - the orchestrator: one run's chain (GetRun, WatchRun, resume), one
//     step's approval, the tool catalog and its run owners (watches);
//   - the validator: the approvals (watch, lists) and the tool catalog;
//   - the executor: one step's record (a wait on it) and one blob's
//     chunks; never the chains or the catalog, which it writes;
//   - the tracer: the chains, run and OTel (its durable consumers and
//     chain reads).
//
// A filter's own wildcard is a token of the request's subject, which a
// permission's * matches too: the orchestrator's "lctl.chain.*" (one
// chain) lets "lctl.chain.>" through as well; a filter says which
// stream's subjects, not how many chains.
//
// A taken-over executor or validator can no longer fill LCTL's bound
// (lctl tail, WatchRun and the tracer's reads fail then), nor the
// catalog's. What remains shared: the orchestrator, the tracer and the
// reader on LCTL, the orchestrator and the validator on the approvals
// and the catalog (docs/security.md, "NATS").
var consumes = map[string]map[string][]string{
	Orchestrator: {
		"LCTL":              {"lctl.chain.*"},
		"KV_XCT_APPROVALS":  {"$KV.XCT_APPROVALS.>"},
		"KV_XCT_TOOLS":      {"$KV.XCT_TOOLS.>"},
		"KV_XCT_RUN_OWNERS": {"$KV.XCT_RUN_OWNERS.>"},
	},
	Validator: {
		"KV_XCT_APPROVALS": {"$KV.XCT_APPROVALS.>"},
		"KV_XCT_TOOLS":     {"$KV.XCT_TOOLS.>"},
	},
	Executor: {
		"KV_XCT_STEPS":       {"$KV.XCT_STEPS.*"},
		"OBJ_XCT_STEP_BLOBS": {"$O.XCT_STEP_BLOBS.C.*"},
	},
	Tracer: {
		"LCTL":      {"lctl.chain.>"},
		"LCTL_OTEL": {"lctl.otel.>"},
	},
}

// consumerCreates are the consumer create requests user may make
// (consumes), each naming its consumer and filter.
func consumerCreates(user string) []string {
	var out []string
	for _, stream := range keysWhere(consumes[user], func([]string) bool { return true }) {
		for _, filter := range consumes[user][stream] {
			out = append(out, "$JS.API.CONSUMER.CREATE."+stream+".*."+filter)
		}
	}
	return out
}

// denied is what user may not request of the JetStream API.
func denied(user string) []string {
	out := slices.Clone(adminOnly)
	names := make([]string, 0, len(purgeable))
	for stream := range purgeable {
		names = append(names, stream)
	}
	sort.Strings(names)
	for _, stream := range names {
		if purgeable[stream] != user {
			out = append(out, "$JS.API.STREAM.PURGE."+stream)
		}
	}
	return append(append(out, othersConsumers(user)...), unreadable(user)...)
}

// readerAPI are the JetStream API requests lctl tail makes: JetStream and
// stream info, and ordered consumers on LCTL and LCTL_OTEL (created, read,
// deleted).
var readerAPI = readerRequests("LCTL", "LCTL_OTEL")

func readerRequests(streams ...string) []string {
	out := []string{"$JS.API.INFO"}
	for _, s := range streams {
		out = append(out,
			"$JS.API.STREAM.INFO."+s,
			"$JS.API.CONSUMER.CREATE."+s+".>",
			"$JS.API.CONSUMER.INFO."+s+".>",
			"$JS.API.CONSUMER.DELETE."+s+".>",
			"$JS.API.CONSUMER.MSG.NEXT."+s+".>",
			"$JS.API.STREAM.MSG.GET."+s,
			"$JS.API.DIRECT.GET."+s+".>",
			"$JS.API.DIRECT.GET."+s)
	}
	return out
}

// serviceAPI are the JetStream API requests every service may make:
// JetStream and stream info, reading messages, and its consumers (KV
// watchers, ordered consumers, the tracer's durable one): read, pulled
// from and deleted, each request naming the consumer; created only on the
// streams and with the filters of consumes. Not listing
// a stream's consumers (that would name the others' ephemeral ones and
// their deliver subjects), nor pausing, unpinning or moving one; and
// another's durable consumer not at all (owned). Creating, updating,
// deleting or purging a stream is not here (purgeable names the two
// purges that are), and adminOnly denies it again whatever an allow says.
var serviceAPI = []string{
	"$JS.API.INFO",
	"$JS.API.STREAM.INFO.*",
	"$JS.API.STREAM.NAMES",
	"$JS.API.STREAM.LIST",
	"$JS.API.STREAM.MSG.GET.*",
	"$JS.API.DIRECT.GET.>",
	"$JS.API.CONSUMER.INFO.*.*",
	"$JS.API.CONSUMER.DELETE.*.*",
	"$JS.API.CONSUMER.MSG.NEXT.*.*",
}

// owned are the durable consumers ("<stream>.<consumer>") and the user
// each belongs to: the tracer's on LCTL and LCTL_OTEL
// (services/tracer.ConsumerName).
// Every consumer request names its consumer in the subject
// ($JS.API.CONSUMER.<op>.<stream>.<consumer>, CREATE with a filter
// after it, two-token ops such as MSG.NEXT and DURABLE.CREATE before
// it), so nobody else may delete it, update it (another filter would
// hide chains from the tracer), pull from it or pause it.
var owned = map[string]string{
	"LCTL.tracer":      Tracer,
	"LCTL_OTEL.tracer": Tracer,
}

// readers are the streams that hold secrets or another service's
// records, each with the services that read it: the approvals (raw
// proposals, arguments unredacted) the validator keeps and the
// orchestrator watches; the redaction key of the three that redact; the
// executor's step records and their blobs; the orchestrator's run owners
// and runs counted per principal; the validator's rate limit counts.
// Every other service is denied their reads (a direct get, a stream get,
// a consumer): a taken-over tracer reads none of them. LCTL and the tool
// catalog are read by all.
var readers = map[string][]string{
	"KV_XCT_APPROVALS":   {Validator, Orchestrator},
	"KV_XCT_REDACTION":   {Orchestrator, Validator, Executor},
	"KV_XCT_STEPS":       {Executor},
	"OBJ_XCT_STEP_BLOBS": {Executor},
	"KV_XCT_RUN_OWNERS":  {Orchestrator},
	"KV_XCT_RUN_QUOTA":   {Orchestrator},
	"KV_XCT_RATE_LIMITS": {Validator},
}

// unreadable are the read requests of the streams user may not read.
func unreadable(user string) []string {
	var out []string
	for _, stream := range keysWhere(readers, func(rs []string) bool { return !slices.Contains(rs, user) }) {
		out = append(out,
			"$JS.API.DIRECT.GET."+stream,
			"$JS.API.DIRECT.GET."+stream+".>",
			"$JS.API.STREAM.MSG.GET."+stream,
			"$JS.API.CONSUMER.CREATE."+stream,
			"$JS.API.CONSUMER.CREATE."+stream+".>",
			"$JS.API.CONSUMER.DURABLE.CREATE."+stream+".>")
	}
	return out
}

// keysWhere returns the keys of m whose values keep holds, sorted (the
// allow and deny lists come out the same at every start).
func keysWhere[V any](m map[string]V, keep func(V) bool) []string {
	var keys []string
	for k, v := range m {
		if keep(v) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// unnamedCreate is the short consumer create request,
// $JS.API.CONSUMER.CREATE.<stream>, which names the consumer in its body
// (config.name) where permissions do not look: given an existing
// consumer's name, the server takes it as an update of that consumer (its
// filter, its inactive threshold), whoever owns it. XCT's clients name
// every consumer in the subject (an ephemeral one too), so nobody but the
// admin makes that request.
const unnamedCreate = "$JS.API.CONSUMER.CREATE.*"

// othersConsumers are the subjects of the requests on the durable
// consumers user does not own, and the request that does not name its
// consumer (unnamedCreate).
func othersConsumers(user string) []string {
	out := []string{unnamedCreate}
	for _, name := range keysWhere(owned, func(owner string) bool { return owner != user }) {
		out = append(out,
			"$JS.API.CONSUMER.*."+name,
			"$JS.API.CONSUMER.*."+name+".>",
			"$JS.API.CONSUMER.*.*."+name)
	}
	return out
}

// writes are the data subjects each service publishes to: its own
// streams and buckets, nobody else's.
var writes = map[string][]string{
	// Chains: the orchestrator's runs. The redaction key is the admin's
	// (xct nats provision makes it): the three services that redact read
	// it (readers) and none writes it, so none can replace the key the
	// others start with.
	Orchestrator: {chains, owners, quota},
	Validator:    {approvals, rates, policyEpochs},
	// The tool catalog the validator judges with, and the step records.
	Executor: {toolsKV, stepsKV, blobsObj},
	// The OTLP ingest writes otel-<trace id> chains, on LCTL_OTEL's
	// subjects only: no run's chain. Its durable consumers'
	// acknowledgements go to $JS.ACK.<stream>.tracer.
	Tracer: {otelChains, "$JS.ACK.LCTL.tracer.>", "$JS.ACK.LCTL_OTEL.tracer.>"},
}

// dataSubjects are the subjects XCT's streams and buckets store, which
// nobody may subscribe to, the admin included. Any service may make a push
// consumer, and its deliver subject is in the request's body, which
// permissions do not see; the server delivers only while a subscription
// names that subject exactly, and a delivery that is made is stored by the
// stream listening there. A consumer aimed at the catalog's fs.write key
// or at a run's chain would write them the day an operator subscribed
// there to look; no one can. (Reading is through consumers delivering to
// one's own inbox, direct gets and lctl tail.)
var dataSubjects = []string{chains, otelChains, toolsKV, stepsKV, blobsObj, approvals, owners, quota, rates, policyEpochs, redaction}

// Permissions returns the subject permissions of user. The admin may
// publish anything (stream updates and deletes included) and subscribe
// anywhere but to XCT's data subjects (dataSubjects). For the others
// everything is an allow list: the JetStream API requests of serviceAPI,
// the purge of the one it must purge, and publishing to its own data
// subjects; no service creates a stream (provision). The admin-only
// requests are denied again on top (a deny wins over any allow in NATS),
// so a too wide allow added later cannot give them. The reader gets the
// API requests lctl tail makes.
func Permissions(user string) (*server.Permissions, error) {
	switch user {
	case Admin:
		return &server.Permissions{Subscribe: &server.SubjectPermission{Deny: slices.Clone(dataSubjects)}}, nil
	case Reader:
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: slices.Clone(readerAPI), Deny: othersConsumers(user)},
			Subscribe: &server.SubjectPermission{Allow: []string{InboxPrefix(user) + ".>"}},
		}, nil
	}
	w, ok := writes[user]
	if !ok {
		return nil, fmt.Errorf("nats: unknown user %q (want one of %s)", user, strings.Join(Users, ", "))
	}
	return &server.Permissions{
		Publish: &server.SubjectPermission{
			Allow: allowed(user, w),
			Deny:  denied(user),
		},
		Subscribe: &server.SubjectPermission{Allow: []string{InboxPrefix(user) + ".>"}},
	}, nil
}

// InboxPrefix is where user's replies come: _INBOX.<user>. Option sets it
// on the connection; a user may subscribe under its own prefix only.
func InboxPrefix(user string) string { return natscred.InboxPrefix(user) }

// ServerUsers turns passwords (user → password) into the embedded
// server's users with their permissions. Every user must be known.
func ServerUsers(passwords map[string]string) ([]*server.User, error) {
	names := make([]string, 0, len(passwords))
	for u := range passwords {
		names = append(names, u)
	}
	sort.Strings(names)
	out := make([]*server.User, 0, len(names))
	for _, u := range names {
		if passwords[u] == "" {
			return nil, fmt.Errorf("nats: user %s has no password", u)
		}
		p, err := Permissions(u)
		if err != nil {
			return nil, err
		}
		out = append(out, &server.User{Username: u, Password: passwords[u], Permissions: p})
	}
	return out, nil
}

// Credentials is one user's name and password (natscred.Credentials;
// Option presents them).
type Credentials = natscred.Credentials

// ErrNoUser means a credentials file has no entry for the user asked.
var ErrNoUser = natscred.ErrNoUser

// File is a credentials file (natscred.File): YAML, one "user: password"
// a line, any subset of Users. xct dev writes one with every user; a
// Kubernetes Secret holds one per service with its own line.
type File = natscred.File

// Load reads a credentials file. It must not be readable by others.
func Load(path string) (File, error) { return natscred.Load(path) }

// NewPassword returns a random password.
func NewPassword() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// DevFile returns the development credentials at path, writing random
// ones for every user (mode 0600, made once) when the file does not exist.
func DevFile(path string) (File, error) {
	if _, err := os.Stat(path); err == nil {
		return Load(path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("nats credentials: %w", err)
	}
	f := File{}
	for _, u := range Users {
		p, err := NewPassword()
		if err != nil {
			return nil, err
		}
		f[u] = p
	}
	out, err := yaml.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("nats credentials: %w", err)
	}
	header := "# NATS users of `xct dev`: one password per service, reader (lctl tail)\n" +
		"# and admin. Remove this file to get new ones. Development only.\n"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("nats credentials: %w", err)
	}
	// O_EXCL: two clusters starting at once cannot overwrite each other.
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return Load(path)
	}
	if err != nil {
		return nil, fmt.Errorf("nats credentials: %w", err)
	}
	if _, err := fh.Write(append([]byte(header), out...)); err != nil {
		_ = fh.Close()
		return nil, fmt.Errorf("nats credentials: %w", err)
	}
	if err := fh.Close(); err != nil {
		return nil, fmt.Errorf("nats credentials: %w", err)
	}
	return f, nil
}

// MaxConsumersPerStream bounds the consumers of each stream, durable and
// ephemeral, on every NATS server XCT configures (natsembed, the
// nats-server configurations of the tests and the chaos suite, and
// deploy/k8s): any service may create consumers, and which ones is in the
// request's body, which permissions do not see, so without a bound a
// taken-over service could make durable consumers until the server's
// memory or disk gave out (they outlive its connection, and restarts).
// NATS has no per-user bound; this is the per-stream one (the server's
// default_max_consumers, which applies to every stream that sets none,
// XCT's included). XCT's own use per stream is far below: the tracer's
// durable consumer, one ordered consumer per WatchRun (at most
// orchestrator.DefaultMaxWatches per principal), per lctl tail and per
// chain read, one KV watcher per service, per run waiting for an
// approval (at most orchestrator.DefaultMaxRuns runs per principal) and
// per step waiting on its record. Past the bound a create is
// refused (JetStream error 10026) and the service fails the request
// visibly; a deployment with more runs waiting for approvals at once
// raises it in its nats.conf.
const MaxConsumersPerStream = 1000

// JetStreamLimits is the "limits" block of a nats-server "jetstream"
// block that sets MaxConsumersPerStream.
func JetStreamLimits() string {
	return fmt.Sprintf("limits { default_max_consumers: %d }", MaxConsumersPerStream)
}

// ServerConfig renders the NATS server configuration block that gives
// passwords' users their permissions (the "authorization" block of a
// nats-server configuration file; deploy/k8s has the same with the
// passwords from variables).
func ServerConfig(passwords File) (string, error) {
	users, err := ServerUsers(passwords)
	if err != nil {
		return "", err
	}
	list := func(l []string) string {
		q := make([]string, len(l))
		for i, s := range l {
			q[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	var b strings.Builder
	b.WriteString("authorization {\n  users: [\n")
	for _, u := range users {
		fmt.Fprintf(&b, "    {\n      user: %s\n      password: %s\n", strconv.Quote(u.Username), strconv.Quote(u.Password))
		if p := u.Permissions; p != nil {
			// Only the lists a user has: an empty allow list would
			// allow nothing.
			perm := func(what string, sp *server.SubjectPermission) {
				if sp == nil {
					return
				}
				var parts []string
				if len(sp.Allow) > 0 {
					parts = append(parts, "allow: "+list(sp.Allow))
				}
				if len(sp.Deny) > 0 {
					parts = append(parts, "deny: "+list(sp.Deny))
				}
				fmt.Fprintf(&b, "        %s: {%s}\n", what, strings.Join(parts, ", "))
			}
			b.WriteString("      permissions: {\n")
			perm("publish", p.Publish)
			perm("subscribe", p.Subscribe)
			b.WriteString("      }\n")
		}
		b.WriteString("    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String(), nil
}

// WriteSubset writes the entries of f for users to path (mode 0600,
// replacing it): xct dev gives lctl tail a file with the reader's
// password only.
func WriteSubset(path string, f File, users ...string) error {
	sub := File{}
	for _, u := range users {
		p, ok := f[u]
		if !ok {
			return fmt.Errorf("nats credentials: %w: %s", ErrNoUser, u)
		}
		sub[u] = p
	}
	out, err := yaml.Marshal(sub)
	if err != nil {
		return fmt.Errorf("nats credentials: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".nats-*.yaml")
	if err != nil {
		return fmt.Errorf("nats credentials: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(out); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("nats credentials: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("nats credentials: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("nats credentials: %w", err)
	}
	return nil
}
