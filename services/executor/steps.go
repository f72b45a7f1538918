package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/jsguard"
	"github.com/xct-dev/xct/internal/storehealth"
)

// Buckets holding the step records.
const (
	// StepsBucket is the JetStream KV bucket of step records: key the step
	// id, value the StepRecord in binary protobuf (records written before
	// session 4, and by an executor run with --step-record-format=json,
	// are protobuf JSON; both are read).
	StepsBucket = "XCT_STEPS"
	// BlobsBucket is the JetStream object store of what does not fit in a
	// record: compensations and large responses, named after their step.
	BlobsBucket = "XCT_STEP_BLOBS"
)

// StepStore keeps step records and their blobs. Every change of a record
// is conditional on the revision the writer read, so two executors can
// never both start, re-run or finish the same step. The executor uses a
// JetStream store when it has a NATS connection and an in-memory one
// otherwise (unit tests).
type StepStore interface {
	// Create records rec if its step id has no record yet and returns the
	// new revision; ErrStepExists otherwise.
	Create(ctx context.Context, rec *xctv1.StepRecord) (uint64, error)
	// Get returns a step's record and its revision; ErrStepNotFound when
	// there is none.
	Get(ctx context.Context, stepID string) (*xctv1.StepRecord, uint64, error)
	// Update replaces the record if its revision is still rev and returns
	// the new revision; ErrStepConflict otherwise.
	Update(ctx context.Context, rec *xctv1.StepRecord, rev uint64) (uint64, error)
	// Delete removes the record if its revision is still rev;
	// ErrStepConflict otherwise.
	Delete(ctx context.Context, stepID string, rev uint64) error
	// WaitChange returns nil once the step's record is no longer at
	// revision rev (changed or deleted), or ctx's error.
	WaitChange(ctx context.Context, stepID string, rev uint64) error
	// PutBlob stores data under name, replacing what was there.
	PutBlob(ctx context.Context, name string, data []byte) error
	// Blob returns the data stored under name; ErrStepNotFound when none.
	Blob(ctx context.Context, name string) ([]byte, error)
	// MaxRecordBytes is the largest encoded record the store accepts.
	MaxRecordBytes() int
}

// Record formats: how a record is stored. Both are always read (a rolling
// upgrade reads what the previous version wrote); FormatProto is written
// unless Config.RecordFormat says json, which an executor must write while
// executors older than the binary form still read the same bucket.
const (
	// FormatProto is the binary protobuf encoding: 4-5x cheaper to encode
	// than JSON and about half its size.
	FormatProto = "proto"
	// FormatJSON is protobuf JSON, the only form executors before session 4
	// read and wrote.
	FormatJSON = "json"
)

// encodeRecord is the stored form of a record: binary protobuf, or
// protobuf JSON when asJSON.
func encodeRecord(rec *xctv1.StepRecord, asJSON bool) ([]byte, error) {
	if asJSON {
		return protojson.Marshal(rec)
	}
	return proto.Marshal(rec)
}

// decodeRecord reads a stored record in either form. A protobuf JSON
// record is an object, so it starts with '{'; a binary one never does:
// its first byte is the key of its lowest field present, and 0x7b would be
// field 15 with the group wire type, which proto3 never writes. Fields
// unknown to this version are dropped from JSON and kept (and written back
// on update) in binary.
func decodeRecord(data []byte) (*xctv1.StepRecord, error) {
	rec := &xctv1.StepRecord{}
	var err error
	if len(data) > 0 && data[0] == '{' {
		err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(data, rec)
	} else {
		err = proto.Unmarshal(data, rec)
	}
	if err == nil && rec.GetStepId() == "" {
		// Every record names its step: an empty one (or bytes that
		// happened to decode to nothing) is not a record.
		err = errors.New("no step id")
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStepCorrupt, err)
	}
	return rec, nil
}

// memStepStore is a StepStore in memory, for an executor without NATS.
// Records are copied in and out, as a real store would.
type memStepStore struct {
	asJSON  bool // write records as protobuf JSON
	mu      sync.Mutex
	records map[string]memRecord
	blobs   map[string][]byte
	rev     uint64
	changed chan struct{} // closed and replaced on every change
}

type memRecord struct {
	data []byte
	rev  uint64
}

// memMaxRecordBytes matches the default NATS payload limit.
const memMaxRecordBytes = 1 << 20

func newMemStepStore() *memStepStore {
	return &memStepStore{records: map[string]memRecord{}, blobs: map[string][]byte{}, changed: make(chan struct{})}
}

// put stores data as the record of id; the caller holds mu.
func (m *memStepStore) put(id string, data []byte) uint64 {
	m.rev++
	m.records[id] = memRecord{data: data, rev: m.rev}
	close(m.changed)
	m.changed = make(chan struct{})
	return m.rev
}

func (m *memStepStore) encode(rec *xctv1.StepRecord) ([]byte, error) {
	data, err := encodeRecord(rec, m.asJSON)
	if err != nil {
		return nil, err
	}
	if len(data) > memMaxRecordBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrRecordTooLarge, len(data))
	}
	return data, nil
}

func (m *memStepStore) Create(_ context.Context, rec *xctv1.StepRecord) (uint64, error) {
	data, err := m.encode(rec)
	if err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.records[rec.GetStepId()]; ok {
		return 0, ErrStepExists
	}
	return m.put(rec.GetStepId(), data), nil
}

func (m *memStepStore) Get(_ context.Context, id string) (*xctv1.StepRecord, uint64, error) {
	m.mu.Lock()
	r, ok := m.records[id]
	m.mu.Unlock()
	if !ok {
		return nil, 0, ErrStepNotFound
	}
	rec, err := decodeRecord(r.data)
	return rec, r.rev, err
}

func (m *memStepStore) Update(_ context.Context, rec *xctv1.StepRecord, rev uint64) (uint64, error) {
	data, err := m.encode(rec)
	if err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.records[rec.GetStepId()]; !ok || r.rev != rev {
		return 0, ErrStepConflict
	}
	return m.put(rec.GetStepId(), data), nil
}

func (m *memStepStore) Delete(_ context.Context, id string, rev uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.records[id]; !ok || r.rev != rev {
		return ErrStepConflict
	}
	delete(m.records, id)
	close(m.changed)
	m.changed = make(chan struct{})
	return nil
}

func (m *memStepStore) WaitChange(ctx context.Context, id string, rev uint64) error {
	for {
		m.mu.Lock()
		r, ok := m.records[id]
		changed := m.changed
		m.mu.Unlock()
		if !ok || r.rev != rev {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (m *memStepStore) PutBlob(_ context.Context, name string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.blobs[name] = append([]byte(nil), data...)
	return nil
}

func (m *memStepStore) Blob(_ context.Context, name string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.blobs[name]
	if !ok {
		return nil, ErrStepNotFound
	}
	return append([]byte(nil), b...), nil
}

func (m *memStepStore) MaxRecordBytes() int { return memMaxRecordBytes }

// kvStepStore is the StepStore on JetStream: records in the KV bucket
// XCT_STEPS, blobs in the object store XCT_STEP_BLOBS.
type kvStepStore struct {
	asJSON   bool // write records as protobuf JSON
	js       jetstream.JetStream
	kv       jetstream.KeyValue
	blobs    jetstream.ObjectStore
	maxBytes int
	// put writes records without the generic KV client (kvput.go); nil
	// for a bucket it cannot address (a mirror, or a JetStream domain).
	put *kvPut
}

// StepStoreConfig configures the JetStream step store.
type StepStoreConfig struct {
	// Health is told the outcome of every write of a record (nil:
	// nobody; internal/storehealth).
	Health *storehealth.Monitor
	// Retention is how long records and blobs are kept; 0 keeps them
	// forever. A step asked again after its record expired runs again.
	Retention time.Duration
	// JSONRecords writes records as protobuf JSON (FormatJSON) instead of
	// binary protobuf; both are read either way.
	JSONRecords bool
}

// OpenStepStore binds to the XCT_STEPS bucket and the XCT_STEP_BLOBS
// object store on nc's JetStream, which the admin made
// (internal/provision); a missing one is jsguard.ErrMissing. cfg's
// Retention is provisioning's (the executor's --step-retention must match
// what `xct nats provision` was given).
func OpenStepStore(ctx context.Context, nc *nats.Conn, cfg StepStoreConfig) (StepStore, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("step store: jetstream: %w", err)
	}
	// Both made by the admin (internal/provision, with the retention of
	// --step-retention); the executor binds them.
	kv, err := js.KeyValue(ctx, StepsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("step store: %w", jsguard.Missing("bucket", StepsBucket))
	}
	if err != nil {
		return nil, fmt.Errorf("step store: bucket %s: %w", StepsBucket, err)
	}
	blobs, err := js.ObjectStore(ctx, BlobsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("step store: %w", jsguard.Missing("object store", BlobsBucket))
	}
	if err != nil {
		return nil, fmt.Errorf("step store: object store %s: %w", BlobsBucket, err)
	}
	// A record travels in one message; keep room for headers.
	maxBytes := int(nc.MaxPayload()) - 4096
	if maxBytes <= 0 {
		maxBytes = memMaxRecordBytes
	}
	put := newKVPut(ctx, nc, kv)
	if put != nil {
		put.pub.ReportTo(cfg.Health)
	}
	s := &kvStepStore{js: js, kv: cfg.Health.KeyValue(kv), blobs: blobs, maxBytes: maxBytes, asJSON: cfg.JSONRecords, put: put}
	if err := s.onlyOurs(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// recordSubjects are where the records and their blobs are stored.
var recordSubjects = []string{"$KV." + StepsBucket + ".>", "$O." + BlobsBucket + ".>"}

// onlyOurs fails when a stream republishes into the records or their
// blobs. Permissions keep every other service from writing there, but a
// stream's republish is the server's own publish, and a service makes its
// own streams with settings of its choosing: a record planted that way
// for a step not yet run would be replayed as its outcome. It is asked at
// open and on each read of a record (claims that find one, GetStep,
// resolutions; not the step's own writes).
func (s *kvStepStore) onlyOurs(ctx context.Context) error {
	for _, subj := range recordSubjects {
		if err := jsguard.RepublishedInto(ctx, s.js, subj); err != nil {
			return fmt.Errorf("step store: %w; no record is trusted while it does", err)
		}
	}
	return nil
}

func (s *kvStepStore) encode(rec *xctv1.StepRecord) ([]byte, error) {
	data, err := encodeRecord(rec, s.asJSON)
	if err != nil {
		return nil, err
	}
	if len(data) > s.maxBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrRecordTooLarge, len(data))
	}
	return data, nil
}

func (s *kvStepStore) Create(ctx context.Context, rec *xctv1.StepRecord) (uint64, error) {
	data, err := s.encode(rec)
	if err != nil {
		return 0, err
	}
	var rev uint64
	if s.put != nil {
		// Created if the key has no revision at all. A key with one may be
		// deleted (a released claim): the generic Create below tells, and
		// creates over the delete marker.
		rev, err = s.put.write(ctx, rec.GetStepId(), data, 0)
		if !wrongRevision(err) {
			return rev, err
		}
	}
	rev, err = s.kv.Create(ctx, rec.GetStepId(), data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, ErrStepExists
	}
	return rev, err
}

func (s *kvStepStore) Get(ctx context.Context, id string) (*xctv1.StepRecord, uint64, error) {
	e, err := s.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, ErrStepNotFound
	}
	if err != nil {
		return nil, 0, err
	}
	if err := s.onlyOurs(ctx); err != nil {
		return nil, 0, err
	}
	rec, err := decodeRecord(e.Value())
	return rec, e.Revision(), err
}

func (s *kvStepStore) Update(ctx context.Context, rec *xctv1.StepRecord, rev uint64) (uint64, error) {
	data, err := s.encode(rec)
	if err != nil {
		return 0, err
	}
	var n uint64
	if s.put != nil {
		n, err = s.put.write(ctx, rec.GetStepId(), data, rev)
	} else {
		n, err = s.kv.Update(ctx, rec.GetStepId(), data, rev)
	}
	if wrongRevision(err) {
		return 0, ErrStepConflict
	}
	return n, err
}

func (s *kvStepStore) Delete(ctx context.Context, id string, rev uint64) error {
	err := s.kv.Delete(ctx, id, jetstream.LastRevision(rev))
	if wrongRevision(err) {
		return ErrStepConflict
	}
	return err
}

// wrongRevision reports a conditional write that lost against another.
func wrongRevision(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	// Replicated streams answer a conditional write whose subject has
	// another write in process with 10164 (eventlog.Publisher sends such a
	// write again a few times first; still refused, another was first).
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

func (s *kvStepStore) WaitChange(ctx context.Context, id string, rev uint64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The watch delivers the current value first, so a change made before
	// it started is not missed.
	w, err := s.kv.Watch(ctx, id)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	seen := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return ctx.Err()
			}
			if e == nil { // end of the current values
				if !seen {
					return nil // no record any more
				}
				continue
			}
			seen = true
			if e.Revision() != rev || e.Operation() != jetstream.KeyValuePut {
				return nil
			}
		}
	}
}

func (s *kvStepStore) PutBlob(ctx context.Context, name string, data []byte) error {
	_, err := s.blobs.PutBytes(ctx, name, data)
	return err
}

func (s *kvStepStore) Blob(ctx context.Context, name string) ([]byte, error) {
	data, err := s.blobs.GetBytes(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, ErrStepNotFound
	}
	return data, err
}

func (s *kvStepStore) MaxRecordBytes() int { return s.maxBytes }

// cloneRecord copies a record before changing it.
func cloneRecord(rec *xctv1.StepRecord) *xctv1.StepRecord { return proto.CloneOf(rec) }
