package objects

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/render"
	"github.com/trustsync/trustsync/delivery/watch"
)

// Watched is one object's sources: their render plan, the shared watches they read,
// and the last rendering, the base of the next (a source that goes keeps its last
// good content).
type Watched struct {
	spec string // what it was made for
	Plan *render.Plan
	Set  *watch.Set
	Last *render.Rendering
	stop context.CancelFunc
	// Applied is what was last applied per namespace (a TrustTarget's objects), so
	// that a reconcile running before the informer has seen its own write does not
	// send it again.
	Applied map[string]Applied
	// Written is the digest of what was last written (an annotated object's), so
	// that only a write of something new is news (an Event).
	Written string
}

// Applied is one apply: what it wrote, the object's resourceVersion before
// ("" for one it created) and after.
type Applied struct {
	Digest, Before, After string
}

// Seed makes files, what the written objects hold, the last rendering: the base of
// the next, for a controller that has none (just started, or the spec changed).
func (w *Watched) Seed(files map[string]render.File) {
	w.Last = render.FromDisk(w.Plan, files, render.Snapshot{})
}

// watchSources acquires the watches sources read from registry; changed is called on
// every change of them until close.
func watchSources(ctx context.Context, registry *watch.Registry, spec string, sources []v1alpha1.Source, changed func()) (*Watched, error) {
	plan, err := render.NewPlan(sources, "", false)
	if err != nil {
		return nil, err
	}
	set, err := registry.Acquire(watch.RequestFor(plan, nil, ""))
	if err != nil {
		return nil, err
	}
	watchCtx, stop := context.WithCancel(ctx)
	go func() {
		for {
			select {
			case <-watchCtx.Done():
				return
			case <-set.Changed():
				changed()
			}
		}
	}()
	return &Watched{spec: spec, Plan: plan, Set: set, stop: stop, Applied: map[string]Applied{}}, nil
}

func (w *Watched) close() {
	w.Set.Close()
	w.stop()
}

// Render renders the sources as the watches hold them now.
func (w *Watched) Render() *render.Rendering {
	w.Last = render.Render(w.Plan, watch.SnapshotOf(w.Plan, w.Set, nil), w.Last)
	return w.Last
}

// SpecKey is what a watch was made for, in one rendering for a TrustTarget's spec and
// an annotated object's sources: their JSON, which follows pointers (a %+v of a
// pointer field would be its address, new at every decoding).
func SpecKey(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("unencodable %T: %v", v, err)
	}
	return string(raw)
}

// Tended is the watches of every object a controller keeps, by key, each made anew
// when what it was made for (its spec) changes. A key is reconciled by one worker at
// a time, so what a watched holds is that worker's; the map is shared.
type Tended struct {
	registry *watch.Registry
	changed  func(key string)

	mu sync.Mutex
	by map[string]*Watched
}

// NewTended keeps watches from registry; changed is called with the key of one
// whose sources changed.
func NewTended(registry *watch.Registry, changed func(key string)) *Tended {
	return &Tended{registry: registry, changed: changed, by: map[string]*Watched{}}
}

// Get returns key's watches for sources, made for spec (specKey of what the object
// asks), made anew when spec changed.
func (t *Tended) Get(ctx context.Context, key, spec string, sources []v1alpha1.Source) (*Watched, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.by[key]; ok && st.spec == spec {
		return st, nil
	}
	if st, ok := t.by[key]; ok {
		st.close()
		delete(t.by, key)
	}
	st, err := watchSources(ctx, t.registry, spec, sources, func() { t.changed(key) })
	if err != nil {
		return nil, err
	}
	t.by[key] = st
	return st, nil
}

// Lookup is key's watches, nil when it has none.
func (t *Tended) Lookup(key string) *Watched {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.by[key]
}

// Count is how many keys starting with prefix have watches.
func (t *Tended) Count(prefix string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for key := range t.by {
		if strings.HasPrefix(key, prefix) {
			n++
		}
	}
	return n
}

// Forget closes key's watches.
func (t *Tended) Forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.by[key]; ok {
		st.close()
		delete(t.by, key)
	}
}

// CloseAll closes every watch, when the controller stops.
func (t *Tended) CloseAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, st := range t.by {
		st.close()
		delete(t.by, key)
	}
}
