package targets

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

// watched is one object's sources: their render plan, the shared watches they read,
// and the last rendering, the base of the next (a source that goes keeps its last
// good content).
type watched struct {
	spec string // what it was made for
	plan *render.Plan
	set  *watch.Set
	last *render.Rendering
	stop context.CancelFunc
	// applied is what was last applied per namespace (a TrustTarget's objects), so
	// that a reconcile running before the informer has seen its own write does not
	// send it again.
	applied map[string]appliedState
	// written is the digest of what was last written (an annotated object's), so
	// that only a write of something new is news (an Event).
	written string
}

// appliedState is one apply: what it wrote, the object's resourceVersion before
// ("" for one it created) and after.
type appliedState struct {
	digest, before, after string
}

// seed makes files, what the written objects hold, the last rendering: the base of
// the next, for a controller that has none (just started, or the spec changed).
func (w *watched) seed(files map[string]render.File) {
	w.last = render.FromDisk(w.plan, files, render.Snapshot{})
}

// watchSources acquires the watches sources read from registry; changed is called on
// every change of them until close.
func watchSources(ctx context.Context, registry *watch.Registry, spec string, sources []v1alpha1.Source, changed func()) (*watched, error) {
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
	return &watched{spec: spec, plan: plan, set: set, stop: stop, applied: map[string]appliedState{}}, nil
}

func (w *watched) close() {
	w.set.Close()
	w.stop()
}

// render renders the sources as the watches hold them now.
func (w *watched) render() *render.Rendering {
	w.last = render.Render(w.plan, watch.SnapshotOf(w.plan, w.set, nil), w.last)
	return w.last
}

// specKey is what a watch was made for, in one rendering for a TrustTarget's spec and
// an annotated object's sources: their JSON, which follows pointers (a %+v of a
// pointer field would be its address, new at every decoding).
func specKey(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("unencodable %T: %v", v, err)
	}
	return string(raw)
}

// tended is the watches of every object a controller keeps, by key, each made anew
// when what it was made for (its spec) changes. A key is reconciled by one worker at
// a time, so what a watched holds is that worker's; the map is shared.
type tended struct {
	registry *watch.Registry
	changed  func(key string)

	mu sync.Mutex
	by map[string]*watched
}

func newTended(registry *watch.Registry, changed func(key string)) *tended {
	return &tended{registry: registry, changed: changed, by: map[string]*watched{}}
}

// get returns key's watches for sources, made for spec (specKey of what the object
// asks), made anew when spec changed.
func (t *tended) get(ctx context.Context, key, spec string, sources []v1alpha1.Source) (*watched, error) {
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

// lookup is key's watches, nil when it has none.
func (t *tended) lookup(key string) *watched {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.by[key]
}

// count is how many keys starting with prefix have watches.
func (t *tended) count(prefix string) int {
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

// forget closes key's watches.
func (t *tended) forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.by[key]; ok {
		st.close()
		delete(t.by, key)
	}
}

// closeAll closes every watch, when the controller stops.
func (t *tended) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, st := range t.by {
		st.close()
		delete(t.by, key)
	}
}
