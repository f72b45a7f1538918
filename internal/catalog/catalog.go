// Package catalog shares the executor's tool catalog through the JetStream KV
// bucket XCT_TOOLS (key: tool name, value: the ToolDescriptor as protobuf
// JSON). The executor publishes it; the validator watches it. So the
// validator learns every tool's schema and effect class without ever calling
// the executor, and the only service-to-service calls stay orchestrator →
// validator and orchestrator → executor.
package catalog

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/jsguard"
)

// Bucket is the KV bucket holding the catalog.
const Bucket = "XCT_TOOLS"

// bucket binds to the catalog's bucket, which the admin made
// (internal/provision).
func bucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("tool catalog: %w", jsguard.Missing("bucket", Bucket))
	}
	if err != nil {
		return nil, fmt.Errorf("tool catalog bucket: %w", err)
	}
	return kv, nil
}

// Publish writes tools to the catalog. Entries that did not change are left
// alone, so restarting an executor does not churn watchers.
func Publish(ctx context.Context, js jetstream.JetStream, tools []*xctv1.ToolDescriptor) error {
	kv, err := bucket(ctx, js)
	if err != nil {
		return err
	}
	for _, t := range tools {
		val, err := protojson.Marshal(t)
		if err != nil {
			return fmt.Errorf("publish tool %s: %w", t.GetName(), err)
		}
		if cur, err := kv.Get(ctx, t.GetName()); err == nil {
			old := &xctv1.ToolDescriptor{}
			if protojson.Unmarshal(cur.Value(), old) == nil && proto.Equal(old, t) {
				continue
			}
		}
		if _, err := kv.Put(ctx, t.GetName(), val); err != nil {
			return fmt.Errorf("publish tool %s: %w", t.GetName(), err)
		}
	}
	return nil
}

// Catalog is a live view of the published tools.
type Catalog struct {
	mu    sync.RWMutex
	tools map[string]*xctv1.ToolDescriptor
	// version counts changes, so caches keyed on a descriptor can tell.
	version uint64
	// tainted: a stream republished into the catalog (taint).
	tainted bool
}

// Get returns a tool's descriptor.
func (c *Catalog) Get(name string) (*xctv1.ToolDescriptor, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.tools[name]
	return t, ok
}

// List returns every tool, sorted by name.
func (c *Catalog) List() []*xctv1.ToolDescriptor {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*xctv1.ToolDescriptor, 0, len(c.tools))
	for _, t := range c.tools {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

// Static returns a catalog that holds tools and never changes (for tests
// and offline policy checks).
func Static(tools ...*xctv1.ToolDescriptor) *Catalog {
	c := &Catalog{tools: map[string]*xctv1.ToolDescriptor{}}
	for _, t := range tools {
		c.tools[t.GetName()] = t
	}
	return c
}

// subjects are the catalog bucket's subjects.
const subjects = "$KV." + Bucket + ".>"

// Watch loads the catalog and keeps it current until ctx ends. It returns
// once the entries present now are loaded.
//
// Only the executor may write the catalog (NATS permissions), but a
// stream's republish is the server's own publish, which no permission
// sees, and a stream's settings are its first creator's: a service that
// made its own bucket first could have it republish what it writes into
// the catalog (jsguard). Watch refuses to load while a stream does, and a
// loaded catalog checks again before each change: if one does then, the
// catalog drops every tool for good (an unknown tool is denied).
func Watch(ctx context.Context, js jetstream.JetStream) (*Catalog, error) {
	kv, err := bucket(ctx, js)
	if err != nil {
		return nil, err
	}
	if err := republishedInto(ctx, js); err != nil {
		return nil, fmt.Errorf("tool catalog: %w", err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch tool catalog: %w", err)
	}
	c := &Catalog{tools: map[string]*xctv1.ToolDescriptor{}}
	loaded := make(chan error, 1)
	go func() {
		defer func() { _ = w.Stop() }()
		initial := true
		for {
			select {
			case <-ctx.Done():
				return
			case entry, ok := <-w.Updates():
				if !ok {
					return
				}
				if entry == nil { // end of the initial values
					if initial {
						initial = false
						// Again, now the entries are in: a stream made
						// meanwhile.
						loaded <- republishedInto(ctx, js)
					}
					continue
				}
				if !initial {
					if err := republishedInto(ctx, js); err != nil {
						c.taint()
						continue
					}
				}
				c.apply(entry)
			}
		}
	}()
	select {
	case err := <-loaded:
		if err != nil {
			return nil, fmt.Errorf("tool catalog: %w", err)
		}
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// republishedInto is jsguard's guard for the catalog's subjects, asked
// again while the streams cannot be listed, so a moment's outage does not
// drop the catalog.
func republishedInto(ctx context.Context, js jetstream.JetStream) error {
	return jsguard.RepublishedIntoPatiently(ctx, js, subjects)
}

// taint drops every tool for good: the catalog can no longer be told
// from what another stream republished into it.
func (c *Catalog) taint() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.version++
	c.tainted = true
	c.tools = map[string]*xctv1.ToolDescriptor{}
}

func (c *Catalog) apply(entry jetstream.KeyValueEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tainted {
		return
	}
	c.version++
	if entry.Operation() != jetstream.KeyValuePut {
		delete(c.tools, entry.Key())
		return
	}
	t := &xctv1.ToolDescriptor{}
	if err := protojson.Unmarshal(entry.Value(), t); err != nil || t.GetName() != entry.Key() {
		// A value we cannot read is treated as an unknown tool: deny.
		delete(c.tools, entry.Key())
		return
	}
	c.tools[entry.Key()] = t
}
